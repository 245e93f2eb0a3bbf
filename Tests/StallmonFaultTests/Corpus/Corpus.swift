// The seed corpus of the fault fuzzers (FaultFuzzTests.swift), embedded as string literals so that SwiftPM does not
// see data files in the test target.
//
// Reports: `reportCPU` and `reportLock` are real reports written by `stallmon demo` (`--stalls cpu,lock
// --threshold-ms 50`, STALLMON_MAX_SAMPLES=4, STALLMON_MAX_FRAMES=10) with the image list trimmed to the images their
// frames use; `reportLock` was then turned into an interim report carrying every optional field (annotations,
// suppressedBefore, frozenMs, a timed-out and an idle sample). `reportMinimal` keeps only the required fields.
// Configs: the shipped config/stallmon.conf, a service's small config, and a terse one.

enum FaultCorpus {
    static let reportCPU = #"""
{
  "captures": {
    "succeeded": 4,
    "timedOut": 0,
    "pauseMedianUs": 45.836,
    "pauseMaxUs": 95.318,
    "attempted": 4
  },
  "loop": "demo-main",
  "frames": [
    {
      "buildId": "99718a538f3d1a6c8628be5d475f8567f14c8484",
      "image": 0,
      "inApp": true,
      "offset": "0x1142368",
      "symbol": "static stallmon.DemoStalls.crunchPrimes(milliseconds: Swift.Int) -> Swift.Int",
      "address": "0x561cae180368",
      "module": "/work/main/.build-faults/x86_64-unknown-linux-gnu/debug/stallmon",
      "symbolOffset": 824
    },
    {
      "buildId": "99718a538f3d1a6c8628be5d475f8567f14c8484",
      "image": 0,
      "line": 200,
      "inApp": true,
      "offset": "0x113f8e8",
      "symbol": "stallmon.DemoService.(injectNextStall in _1F4B438363101C34261E28C86EF351B3)() -> ()",
      "address": "0x561cae17d8e9",
      "module": "/work/main/.build-faults/x86_64-unknown-linux-gnu/debug/stallmon",
      "file": "/work/main/Sources/stallmon/Demo/DemoCommand.swift",
      "symbolOffset": 424
    },
    {
      "buildId": "99718a538f3d1a6c8628be5d475f8567f14c8484",
      "image": 0,
      "line": 165,
      "inApp": true,
      "offset": "0x1134a6a",
      "symbol": "closure #2 @Sendable () -> () in stallmon.DemoService.start() -> ()",
      "address": "0x561cae172a6b",
      "module": "/work/main/.build-faults/x86_64-unknown-linux-gnu/debug/stallmon",
      "file": "/work/main/Sources/stallmon/Demo/DemoCommand.swift",
      "symbolOffset": 26
    },
    {
      "buildId": "99718a538f3d1a6c8628be5d475f8567f14c8484",
      "image": 0,
      "line": 248,
      "inApp": false,
      "offset": "0x1096f56",
      "symbol": "StallmonLoop.Looper.(fireDueTimers in _6CDD47DA803234AE92C9530E688A4DCA)(now: Swift.UInt64) -> ()",
      "address": "0x561cae0d4f57",
      "module": "/work/main/.build-faults/x86_64-unknown-linux-gnu/debug/stallmon",
      "file": "/work/main/Sources/StallmonLoop/Looper.swift",
      "symbolOffset": 2518
    },
    {
      "buildId": "99718a538f3d1a6c8628be5d475f8567f14c8484",
      "image": 0,
      "line": 460,
      "inApp": false,
      "offset": "0x108fd74",
      "symbol": "StallmonLoop.Looper.(runPass in _6CDD47DA803234AE92C9530E688A4DCA)(deadline: Swift.Optional<Swift.UInt64>) -> ()",
      "address": "0x561cae0cdd75",
      "module": "/work/main/.build-faults/x86_64-unknown-linux-gnu/debug/stallmon",
      "file": "/work/main/Sources/StallmonLoop/Looper.swift",
      "symbolOffset": 132
    },
    {
      "buildId": "99718a538f3d1a6c8628be5d475f8567f14c8484",
      "image": 0,
      "line": 452,
      "inApp": false,
      "offset": "0x108d647",
      "symbol": "StallmonLoop.Looper.(runLoop in _6CDD47DA803234AE92C9530E688A4DCA)(deadline: Swift.Optional<Swift.UInt64>) -> ()",
      "address": "0x561cae0cb648",
      "module": "/work/main/.build-faults/x86_64-unknown-linux-gnu/debug/stallmon",
      "file": "/work/main/Sources/StallmonLoop/Looper.swift",
      "symbolOffset": 647
    },
    {
      "buildId": "99718a538f3d1a6c8628be5d475f8567f14c8484",
      "image": 0,
      "line": 137,
      "inApp": false,
      "offset": "0x1095566",
      "symbol": "StallmonLoop.Looper.run(until: StallmonLoop.MonotonicInstant) -> ()",
      "address": "0x561cae0d3567",
      "module": "/work/main/.build-faults/x86_64-unknown-linux-gnu/debug/stallmon",
      "file": "/work/main/Sources/StallmonLoop/Looper.swift",
      "symbolOffset": 38
    },
    {
      "buildId": "99718a538f3d1a6c8628be5d475f8567f14c8484",
      "image": 0,
      "line": 142,
      "inApp": false,
      "offset": "0x10955b7",
      "symbol": "StallmonLoop.Looper.run(for: Swift.Duration) -> ()",
      "address": "0x561cae0d35b8",
      "module": "/work/main/.build-faults/x86_64-unknown-linux-gnu/debug/stallmon",
      "file": "/work/main/Sources/StallmonLoop/Looper.swift",
      "symbolOffset": 71
    },
    {
      "buildId": "99718a538f3d1a6c8628be5d475f8567f14c8484",
      "image": 0,
      "line": 85,
      "inApp": true,
      "offset": "0x113b63c",
      "symbol": "stallmon.DemoCommand.run() throws -> ()",
      "address": "0x561cae17963d",
      "module": "/work/main/.build-faults/x86_64-unknown-linux-gnu/debug/stallmon",
      "file": "/work/main/Sources/stallmon/Demo/DemoCommand.swift",
      "symbolOffset": 5628
    },
    {
      "buildId": "99718a538f3d1a6c8628be5d475f8567f14c8484",
      "image": 0,
      "inApp": false,
      "offset": "0x1133e06",
      "symbol": "protocol witness for ArgumentParser.ParsableCommand.run() throws -> () in conformance stallmon.DemoCommand : ArgumentParser.ParsableCommand in stallmon",
      "address": "0x561cae171e07",
      "module": "/work/main/.build-faults/x86_64-unknown-linux-gnu/debug/stallmon",
      "symbolOffset": 54
    },
    {
      "buildId": "99718a538f3d1a6c8628be5d475f8567f14c8484",
      "image": 0,
      "line": 20,
      "inApp": true,
      "offset": "0x1142371",
      "symbol": "static stallmon.DemoStalls.crunchPrimes(milliseconds: Swift.Int) -> Swift.Int",
      "address": "0x561cae180371",
      "module": "/work/main/.build-faults/x86_64-unknown-linux-gnu/debug/stallmon",
      "file": "/work/main/Sources/stallmon/Demo/DemoStalls.swift",
      "symbolOffset": 833
    }
  ],
  "samples": [
    {
      "state": "R",
      "truncated": true,
      "offsetMs": 50.431857,
      "status": "ok",
      "frames": [
        0,
        1,
        2,
        3,
        4,
        5,
        6,
        7,
        8,
        9
      ],
      "label": "stall.injector"
    },
    {
      "state": "R",
      "truncated": true,
      "offsetMs": 60.353171,
      "status": "ok",
      "frames": [
        10,
        1,
        2,
        3,
        4,
        5,
        6,
        7,
        8,
        9
      ],
      "label": "stall.injector"
    },
    {
      "state": "R",
      "truncated": true,
      "offsetMs": 70.341671,
      "status": "ok",
      "frames": [
        0,
        1,
        2,
        3,
        4,
        5,
        6,
        7,
        8,
        9
      ],
      "label": "stall.injector"
    },
    {
      "state": "R",
      "truncated": true,
      "offsetMs": 80.236735,
      "status": "ok",
      "frames": [
        10,
        1,
        2,
        3,
        4,
        5,
        6,
        7,
        8,
        9
      ],
      "label": "stall.injector"
    }
  ],
  "topFrame": {
    "module": "/work/main/.build-faults/x86_64-unknown-linux-gnu/debug/stallmon",
    "symbol": "static stallmon.DemoStalls.crunchPrimes(milliseconds: Swift.Int) -> Swift.Int"
  },
  "class": "cpu",
  "threadStats": {
    "voluntarySwitches": 2,
    "involuntarySwitches": 32,
    "runDelayMs": 63.960994,
    "cpuMs": 132.322018,
    "windowMs": 196.283147,
    "sleepMs": 0.000135
  },
  "thresholdMs": 50,
  "signature": "d192c3ce17c1093c",
  "callTree": [
    {
      "children": [
        {
          "samples": 4,
          "children": [
            {
              "children": [
                {
                  "children": [
                    {
                      "frame": 5,
                      "children": [
                        {
                          "frame": 4,
                          "samples": 4,
                          "children": [
                            {
                              "samples": 4,
                              "children": [
                                {
                                  "frame": 2,
                                  "children": [
                                    {
                                      "samples": 4,
                                      "frame": 1,
                                      "children": [
                                        {
                                          "frame": 0,
                                          "children": [],
                                          "samples": 4
                                        }
                                      ]
                                    }
                                  ],
                                  "samples": 4
                                }
                              ],
                              "frame": 3
                            }
                          ]
                        }
                      ],
                      "samples": 4
                    }
                  ],
                  "samples": 4,
                  "frame": 6
                }
              ],
              "frame": 7,
              "samples": 4
            }
          ],
          "frame": 8
        }
      ],
      "frame": 9,
      "samples": 4
    }
  ],
  "id": "ea580a6b-75c1-49d6-9acc-2663e45ea7c1",
  "images": [
    {
      "loadBias": "0x561cad03e000",
      "buildId": "99718a538f3d1a6c8628be5d475f8567f14c8484",
      "start": "0x561cad03e000",
      "end": "0x561cae7f3e20",
      "path": "/work/main/.build-faults/x86_64-unknown-linux-gnu/debug/stallmon"
    }
  ],
  "label": "stall.injector",
  "start": {
    "monotonicNs": 4442138066245,
    "wall": "2026-11-22T02:57:55.985Z"
  },
  "ongoing": false,
  "schema": "stallmon.report/1",
  "process": {
    "pid": 6819,
    "buildId": "99718a538f3d1a6c8628be5d475f8567f14c8484",
    "executable": "/work/main/.build-faults/x86_64-unknown-linux-gnu/debug/stallmon",
    "hostname": "vm"
  },
  "thread": {
    "tid": 6819,
    "name": "stallmon"
  },
  "durationSource": "loop",
  "durationMs": 202.233896,
  "hottestStack": {
    "of": 4,
    "frames": [
      0,
      1,
      2,
      3,
      4,
      5,
      6,
      7,
      8,
      9
    ],
    "samples": 4
  }
}
"""#

    static let reportLock = #"""
{
  "durationMs": 150.45363,
  "captures": {
    "succeeded": 3,
    "attempted": 4,
    "timedOut": 1,
    "pauseMaxUs": 126.627,
    "pauseMedianUs": 37.871
  },
  "samples": [
    {
      "truncated": true,
      "state": "S",
      "status": "ok",
      "label": "stall.injector",
      "offsetMs": 50.239546,
      "frames": [
        0,
        1,
        2,
        3,
        4,
        5,
        6,
        7,
        8,
        9
      ]
    },
    {
      "truncated": true,
      "state": "S",
      "status": "ok",
      "label": "stall.injector",
      "offsetMs": 60.261619,
      "frames": [
        0,
        1,
        2,
        3,
        4,
        5,
        6,
        7,
        8,
        9
      ]
    },
    {
      "truncated": true,
      "state": "S",
      "status": "timed-out",
      "label": "stall.injector",
      "offsetMs": 70.254046,
      "frames": []
    },
    {
      "truncated": true,
      "state": "S",
      "status": "ok",
      "label": "stall.injector",
      "offsetMs": 80.247945,
      "frames": [
        0,
        1,
        2,
        3,
        4,
        5,
        6,
        7,
        8,
        9
      ],
      "idle": true
    }
  ],
  "loop": "demo-main",
  "durationSource": "watchdog",
  "schema": "stallmon.report/1",
  "thresholdMs": 50,
  "process": {
    "pid": 6819,
    "buildId": "99718a538f3d1a6c8628be5d475f8567f14c8484",
    "executable": "/work/main/.build-faults/x86_64-unknown-linux-gnu/debug/stallmon",
    "hostname": "vm"
  },
  "frames": [
    {
      "symbolOffset": 41,
      "image": 1,
      "address": "0x7fb5818a4129",
      "module": "/lib/x86_64-linux-gnu/libc.so.6",
      "buildId": "93ac61ec5a8eb1396f9fbd350e3169a558528a40",
      "file": "../sysdeps/nptl/futex-internal.h",
      "line": 146,
      "offset": "0x86129",
      "inApp": false,
      "symbol": "__GI___lll_lock_wait"
    },
    {
      "symbolOffset": 273,
      "image": 1,
      "address": "0x7fb5818aa482",
      "module": "/lib/x86_64-linux-gnu/libc.so.6",
      "buildId": "93ac61ec5a8eb1396f9fbd350e3169a558528a40",
      "file": "./nptl/pthread_mutex_lock.c",
      "line": 48,
      "offset": "0x8c481",
      "inApp": false,
      "symbol": "__pthread_mutex_lock@GLIBC_2.2.5"
    },
    {
      "symbolOffset": 28,
      "image": 0,
      "address": "0x561cae180afd",
      "module": "/work/main/.build-faults/x86_64-unknown-linux-gnu/debug/stallmon",
      "buildId": "99718a538f3d1a6c8628be5d475f8567f14c8484",
      "file": "/work/main/Sources/stallmon/Demo/DemoStalls.swift",
      "line": 118,
      "offset": "0x1142afc",
      "inApp": true,
      "symbol": "stallmon.ContendedLock.acquireAndRelease() -> ()"
    },
    {
      "symbolOffset": 204,
      "image": 0,
      "address": "0x561cae18095d",
      "module": "/work/main/.build-faults/x86_64-unknown-linux-gnu/debug/stallmon",
      "buildId": "99718a538f3d1a6c8628be5d475f8567f14c8484",
      "file": "/work/main/Sources/stallmon/Demo/DemoStalls.swift",
      "line": 68,
      "offset": "0x114295c",
      "inApp": true,
      "symbol": "static stallmon.DemoStalls.waitForContendedLock(_: stallmon.ContendedLock, milliseconds: Swift.Int) -> ()"
    },
    {
      "symbolOffset": 490,
      "image": 0,
      "address": "0x561cae17d92b",
      "module": "/work/main/.build-faults/x86_64-unknown-linux-gnu/debug/stallmon",
      "buildId": "99718a538f3d1a6c8628be5d475f8567f14c8484",
      "file": "/work/main/Sources/stallmon/Demo/DemoCommand.swift",
      "line": 203,
      "offset": "0x113f92a",
      "inApp": true,
      "symbol": "stallmon.DemoService.(injectNextStall in _1F4B438363101C34261E28C86EF351B3)() -> ()"
    },
    {
      "symbolOffset": 26,
      "image": 0,
      "address": "0x561cae172a6b",
      "module": "/work/main/.build-faults/x86_64-unknown-linux-gnu/debug/stallmon",
      "buildId": "99718a538f3d1a6c8628be5d475f8567f14c8484",
      "file": "/work/main/Sources/stallmon/Demo/DemoCommand.swift",
      "line": 165,
      "offset": "0x1134a6a",
      "inApp": true,
      "symbol": "closure #2 @Sendable () -> () in stallmon.DemoService.start() -> ()"
    },
    {
      "symbolOffset": 2518,
      "image": 0,
      "address": "0x561cae0d4f57",
      "module": "/work/main/.build-faults/x86_64-unknown-linux-gnu/debug/stallmon",
      "buildId": "99718a538f3d1a6c8628be5d475f8567f14c8484",
      "file": "/work/main/Sources/StallmonLoop/Looper.swift",
      "line": 248,
      "offset": "0x1096f56",
      "inApp": false,
      "symbol": "StallmonLoop.Looper.(fireDueTimers in _6CDD47DA803234AE92C9530E688A4DCA)(now: Swift.UInt64) -> ()"
    },
    {
      "symbolOffset": 132,
      "image": 0,
      "address": "0x561cae0cdd75",
      "module": "/work/main/.build-faults/x86_64-unknown-linux-gnu/debug/stallmon",
      "buildId": "99718a538f3d1a6c8628be5d475f8567f14c8484",
      "file": "/work/main/Sources/StallmonLoop/Looper.swift",
      "line": 460,
      "offset": "0x108fd74",
      "inApp": false,
      "symbol": "StallmonLoop.Looper.(runPass in _6CDD47DA803234AE92C9530E688A4DCA)(deadline: Swift.Optional<Swift.UInt64>) -> ()"
    },
    {
      "symbolOffset": 647,
      "image": 0,
      "address": "0x561cae0cb648",
      "module": "/work/main/.build-faults/x86_64-unknown-linux-gnu/debug/stallmon",
      "buildId": "99718a538f3d1a6c8628be5d475f8567f14c8484",
      "file": "/work/main/Sources/StallmonLoop/Looper.swift",
      "line": 452,
      "offset": "0x108d647",
      "inApp": false,
      "symbol": "StallmonLoop.Looper.(runLoop in _6CDD47DA803234AE92C9530E688A4DCA)(deadline: Swift.Optional<Swift.UInt64>) -> ()"
    },
    {
      "symbolOffset": 38,
      "image": 0,
      "address": "0x561cae0d3567",
      "module": "/work/main/.build-faults/x86_64-unknown-linux-gnu/debug/stallmon",
      "buildId": "99718a538f3d1a6c8628be5d475f8567f14c8484",
      "file": "/work/main/Sources/StallmonLoop/Looper.swift",
      "line": 137,
      "offset": "0x1095566",
      "inApp": false,
      "symbol": "StallmonLoop.Looper.run(until: StallmonLoop.MonotonicInstant) -> ()"
    }
  ],
  "class": "blocked",
  "topFrame": {
    "symbol": "stallmon.ContendedLock.acquireAndRelease() -> ()",
    "file": "/work/main/Sources/stallmon/Demo/DemoStalls.swift",
    "line": 118,
    "module": "/work/main/.build-faults/x86_64-unknown-linux-gnu/debug/stallmon"
  },
  "label": "stall.injector",
  "signature": "3f8ff945146d9000",
  "hottestStack": {
    "samples": 4,
    "of": 4,
    "frames": [
      0,
      1,
      2,
      3,
      4,
      5,
      6,
      7,
      8,
      9
    ]
  },
  "thread": {
    "name": "stallmon",
    "tid": 6819
  },
  "images": [
    {
      "buildId": "99718a538f3d1a6c8628be5d475f8567f14c8484",
      "path": "/work/main/.build-faults/x86_64-unknown-linux-gnu/debug/stallmon",
      "start": "0x561cad03e000",
      "loadBias": "0x561cad03e000",
      "end": "0x561cae7f3e20"
    },
    {
      "buildId": "93ac61ec5a8eb1396f9fbd350e3169a558528a40",
      "path": "/lib/x86_64-linux-gnu/libc.so.6",
      "start": "0x7fb58181e000",
      "loadBias": "0x7fb58181e000",
      "end": "0x7fb5819fff50"
    }
  ],
  "ongoing": true,
  "threadStats": {
    "involuntarySwitches": 1,
    "windowMs": 133.195399,
    "cpuMs": 0.394981,
    "runDelayMs": 0.064961,
    "voluntarySwitches": 5,
    "sleepMs": 132.735457
  },
  "callTree": [
    {
      "samples": 4,
      "children": [
        {
          "samples": 4,
          "children": [
            {
              "samples": 4,
              "frame": 7,
              "children": [
                {
                  "frame": 6,
                  "samples": 4,
                  "children": [
                    {
                      "frame": 5,
                      "children": [
                        {
                          "children": [
                            {
                              "samples": 4,
                              "frame": 3,
                              "children": [
                                {
                                  "frame": 2,
                                  "children": [
                                    {
                                      "samples": 4,
                                      "frame": 1,
                                      "children": [
                                        {
                                          "children": [],
                                          "samples": 4,
                                          "frame": 0
                                        }
                                      ]
                                    }
                                  ],
                                  "samples": 4
                                }
                              ]
                            }
                          ],
                          "samples": 4,
                          "frame": 4
                        }
                      ],
                      "samples": 4
                    }
                  ]
                }
              ]
            }
          ],
          "frame": 8
        }
      ],
      "frame": 9
    }
  ],
  "start": {
    "wall": "2026-11-22T02:57:57.485Z",
    "monotonicNs": 4443638034334
  },
  "id": "ac143981-0a99-42dd-91bd-aee69f5aeb2c",
  "annotations": {
    "request": "r-42",
    "user": "ünïcødé ✓"
  },
  "suppressedBefore": 3,
  "frozenMs": 12.5
}
"""#

    static let reportMinimal = #"""
{
  "schema": "stallmon.report/1",
  "id": "ea580a6b-75c1-49d6-9acc-2663e45ea7c1",
  "ongoing": false,
  "process": {
    "pid": 6819,
    "buildId": "99718a538f3d1a6c8628be5d475f8567f14c8484",
    "executable": "/work/main/.build-faults/x86_64-unknown-linux-gnu/debug/stallmon",
    "hostname": "vm"
  },
  "thread": {
    "tid": 6819,
    "name": "stallmon"
  },
  "loop": "demo-main",
  "thresholdMs": 50,
  "start": {
    "monotonicNs": 4442138066245,
    "wall": "2026-11-22T02:57:55.985Z"
  },
  "durationMs": 202.233896,
  "durationSource": "loop",
  "label": "stall.injector",
  "captures": {
    "succeeded": 4,
    "timedOut": 0,
    "pauseMedianUs": 45.836,
    "pauseMaxUs": 95.318,
    "attempted": 4
  },
  "samples": [
    {
      "state": "R",
      "truncated": true,
      "offsetMs": 50.431857,
      "status": "ok",
      "frames": [
        0,
        1,
        2,
        3,
        4,
        5,
        6,
        7,
        8,
        9
      ],
      "label": "stall.injector"
    }
  ],
  "frames": [
    {
      "buildId": "99718a538f3d1a6c8628be5d475f8567f14c8484",
      "image": 0,
      "inApp": true,
      "offset": "0x1142368",
      "symbol": "static stallmon.DemoStalls.crunchPrimes(milliseconds: Swift.Int) -> Swift.Int",
      "address": "0x561cae180368",
      "module": "/work/main/.build-faults/x86_64-unknown-linux-gnu/debug/stallmon",
      "symbolOffset": 824
    },
    {
      "buildId": "99718a538f3d1a6c8628be5d475f8567f14c8484",
      "image": 0,
      "line": 200,
      "inApp": true,
      "offset": "0x113f8e8",
      "symbol": "stallmon.DemoService.(injectNextStall in _1F4B438363101C34261E28C86EF351B3)() -> ()",
      "address": "0x561cae17d8e9",
      "module": "/work/main/.build-faults/x86_64-unknown-linux-gnu/debug/stallmon",
      "file": "/work/main/Sources/stallmon/Demo/DemoCommand.swift",
      "symbolOffset": 424
    },
    {
      "buildId": "99718a538f3d1a6c8628be5d475f8567f14c8484",
      "image": 0,
      "line": 165,
      "inApp": true,
      "offset": "0x1134a6a",
      "symbol": "closure #2 @Sendable () -> () in stallmon.DemoService.start() -> ()",
      "address": "0x561cae172a6b",
      "module": "/work/main/.build-faults/x86_64-unknown-linux-gnu/debug/stallmon",
      "file": "/work/main/Sources/stallmon/Demo/DemoCommand.swift",
      "symbolOffset": 26
    },
    {
      "buildId": "99718a538f3d1a6c8628be5d475f8567f14c8484",
      "image": 0,
      "line": 248,
      "inApp": false,
      "offset": "0x1096f56",
      "symbol": "StallmonLoop.Looper.(fireDueTimers in _6CDD47DA803234AE92C9530E688A4DCA)(now: Swift.UInt64) -> ()",
      "address": "0x561cae0d4f57",
      "module": "/work/main/.build-faults/x86_64-unknown-linux-gnu/debug/stallmon",
      "file": "/work/main/Sources/StallmonLoop/Looper.swift",
      "symbolOffset": 2518
    },
    {
      "buildId": "99718a538f3d1a6c8628be5d475f8567f14c8484",
      "image": 0,
      "line": 460,
      "inApp": false,
      "offset": "0x108fd74",
      "symbol": "StallmonLoop.Looper.(runPass in _6CDD47DA803234AE92C9530E688A4DCA)(deadline: Swift.Optional<Swift.UInt64>) -> ()",
      "address": "0x561cae0cdd75",
      "module": "/work/main/.build-faults/x86_64-unknown-linux-gnu/debug/stallmon",
      "file": "/work/main/Sources/StallmonLoop/Looper.swift",
      "symbolOffset": 132
    },
    {
      "buildId": "99718a538f3d1a6c8628be5d475f8567f14c8484",
      "image": 0,
      "line": 452,
      "inApp": false,
      "offset": "0x108d647",
      "symbol": "StallmonLoop.Looper.(runLoop in _6CDD47DA803234AE92C9530E688A4DCA)(deadline: Swift.Optional<Swift.UInt64>) -> ()",
      "address": "0x561cae0cb648",
      "module": "/work/main/.build-faults/x86_64-unknown-linux-gnu/debug/stallmon",
      "file": "/work/main/Sources/StallmonLoop/Looper.swift",
      "symbolOffset": 647
    },
    {
      "buildId": "99718a538f3d1a6c8628be5d475f8567f14c8484",
      "image": 0,
      "line": 137,
      "inApp": false,
      "offset": "0x1095566",
      "symbol": "StallmonLoop.Looper.run(until: StallmonLoop.MonotonicInstant) -> ()",
      "address": "0x561cae0d3567",
      "module": "/work/main/.build-faults/x86_64-unknown-linux-gnu/debug/stallmon",
      "file": "/work/main/Sources/StallmonLoop/Looper.swift",
      "symbolOffset": 38
    },
    {
      "buildId": "99718a538f3d1a6c8628be5d475f8567f14c8484",
      "image": 0,
      "line": 142,
      "inApp": false,
      "offset": "0x10955b7",
      "symbol": "StallmonLoop.Looper.run(for: Swift.Duration) -> ()",
      "address": "0x561cae0d35b8",
      "module": "/work/main/.build-faults/x86_64-unknown-linux-gnu/debug/stallmon",
      "file": "/work/main/Sources/StallmonLoop/Looper.swift",
      "symbolOffset": 71
    },
    {
      "buildId": "99718a538f3d1a6c8628be5d475f8567f14c8484",
      "image": 0,
      "line": 85,
      "inApp": true,
      "offset": "0x113b63c",
      "symbol": "stallmon.DemoCommand.run() throws -> ()",
      "address": "0x561cae17963d",
      "module": "/work/main/.build-faults/x86_64-unknown-linux-gnu/debug/stallmon",
      "file": "/work/main/Sources/stallmon/Demo/DemoCommand.swift",
      "symbolOffset": 5628
    },
    {
      "buildId": "99718a538f3d1a6c8628be5d475f8567f14c8484",
      "image": 0,
      "inApp": false,
      "offset": "0x1133e06",
      "symbol": "protocol witness for ArgumentParser.ParsableCommand.run() throws -> () in conformance stallmon.DemoCommand : ArgumentParser.ParsableCommand in stallmon",
      "address": "0x561cae171e07",
      "module": "/work/main/.build-faults/x86_64-unknown-linux-gnu/debug/stallmon",
      "symbolOffset": 54
    },
    {
      "buildId": "99718a538f3d1a6c8628be5d475f8567f14c8484",
      "image": 0,
      "line": 20,
      "inApp": true,
      "offset": "0x1142371",
      "symbol": "static stallmon.DemoStalls.crunchPrimes(milliseconds: Swift.Int) -> Swift.Int",
      "address": "0x561cae180371",
      "module": "/work/main/.build-faults/x86_64-unknown-linux-gnu/debug/stallmon",
      "file": "/work/main/Sources/stallmon/Demo/DemoStalls.swift",
      "symbolOffset": 833
    }
  ],
  "images": [
    {
      "loadBias": "0x561cad03e000",
      "buildId": "99718a538f3d1a6c8628be5d475f8567f14c8484",
      "start": "0x561cad03e000",
      "end": "0x561cae7f3e20",
      "path": "/work/main/.build-faults/x86_64-unknown-linux-gnu/debug/stallmon"
    }
  ]
}
"""#

    static let configShipped = #"""
# stallmon configuration: `key = value`, one per line; `#` starts a comment.
# Every key can also be set with an environment variable STALLMON_<KEY> (upper case), which overrides this file;
# STALLMON_CONFIG names the file to load. Unknown keys and variables are errors.
# The library takes the same values as StallMonitorConfiguration.

# A loop iteration busy for longer than this is a stall (milliseconds, > 0).
threshold_ms = 100

# While a stall lasts, sample the loop thread's stack this often (milliseconds, < threshold_ms).
sample_interval_ms = 10

# At most this many samples per stall (1..100000); the stall is still timed after that.
max_samples = 500

# At most this many frames per sample (1..256); deeper stacks keep their innermost frames.
max_frames = 128

# A stall still running after this long gets an interim report marked "ongoing", replaced by the final one when it
# ends, so a process that deadlocks and is killed still leaves evidence (milliseconds, > threshold_ms).
interim_after_ms = 2000

# How long the watchdog waits for one stack capture before recording "capture timed out" (milliseconds, <= 5000).
# A thread whose handler has not finished is never signalled again until it has.
capture_timeout_ms = 100

# The real-time signal used to sample the loop thread: SIGRTMIN+N or a number in SIGRTMIN..SIGRTMAX.
# stallmon refuses a signal that already has a handler. All monitors in one process share it.
signal = SIGRTMIN+3

# Where reports go: one JSON file per stall, mode 0600; the directory is created 0700 if missing.
report_dir = ./stallmon-reports

# The JSON-lines event log (stall.begin / stall.interim / stall.end / monitor.error).
# Empty or absent: events.jsonl inside report_dir.
event_log =

# Rotate the event log when it would grow past this many bytes (>= 4096) ...
event_log_max_bytes = 10485760

# ... keeping this many rotated files (events.jsonl.1 ...; 0..100).
event_log_max_files = 3

# At most this many full reports per stall signature (the same kind of stall: same innermost in-app functions of the
# hottest stack) per hour; further ones only get a `stall.end` line marked "suppressed", and the next report of that
# signature says how many were skipped (suppressedBefore). >= 1.
max_reports_per_signature_per_hour = 30

# --- Upload (off unless upload_endpoint is set, or spool = on for a separate `stallmon upload --daemon`) ---

# Queue written reports for upload in <report_dir>/spool/pending: on, off, or empty (on when upload_endpoint is set).
spool =

# Collector URL, http or https. OTLP: the base URL (/v1/logs is appended), e.g. http://otel-collector:4318.
# NDJSON: the full URL. Empty: no in-process uploader.
upload_endpoint =

# otlp (OTLP/HTTP logs, JSON encoding) or ndjson (one report per line).
upload_format = otlp

# Bearer token, sent as `Authorization: Bearer …`; never printed or logged. Prefer STALLMON_UPLOAD_TOKEN or a file.
upload_token =
upload_token_file =

# Extra request headers: `Name: value, Other: value`. Values are never printed.
upload_headers =

# OTLP service.name (empty: the executable's name).
service_name =

# A batch is due at this many reports or this long after its oldest report, whichever comes first ...
upload_batch_max_reports = 100
upload_batch_max_age_ms = 5000

# ... and never holds more than this many bytes of reports (before gzip).
upload_max_body_bytes = 4194304

# Per-request timeout, and the retry backoff for 429/502/503/504 and connection failures: starts at
# upload_backoff_ms, doubles up to upload_backoff_max_ms, with jitter; Retry-After is honoured up to
# upload_retry_after_max_ms. Other answers are not retried: the batch moves to spool/rejected with the reason.
upload_timeout_ms = 10000
upload_backoff_ms = 500
upload_backoff_max_ms = 60000
upload_retry_after_max_ms = 300000

# Spool quotas: beyond any of them the oldest pending reports are dropped (counted and logged once per batch).
spool_max_reports = 10000
spool_max_bytes = 268435456
spool_max_age_hours = 168
"""#

    static let configService = #"""
# A service's stallmon.conf: quoted values, comments after values, blank lines.
threshold_ms = 250            # a quarter second
sample_interval_ms = 12.5
max_samples = 2000
max_frames = 64
interim_after_ms = 5000
capture_timeout_ms = 80
signal = SIGRTMIN+4
report_dir = "/var/lib/checkout/stalls"

event_log_max_bytes = 1048576
event_log_max_files = 0
max_reports_per_signature_per_hour = 5
spool = on
upload_endpoint = https://otel-collector.internal:4318
upload_format = ndjson
upload_headers = X-Tenant: checkout, X-Env: prod
service_name = checkout
upload_batch_max_reports = 10
upload_batch_max_age_ms = 750.5
upload_backoff_ms = 250
upload_backoff_max_ms = 30000
spool_max_age_hours = 0.25
"""#

    static let configTerse = #"""
threshold_ms=40
sample_interval_ms=5
signal=35
spool=off
"""#

    static let reports = [reportCPU, reportLock, reportMinimal]
    static let configs = [configShipped, configService, configTerse]
}

@testable import Stallmon
@testable import StallmonReport
import StallmonTestSupport
@testable import StallmonUpload