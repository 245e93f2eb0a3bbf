import StallmonReport


enum StallAggregation {
    /// Call tree, hottest stack, top in-app frame (innermost in-app frame of the hottest stack) and signature of
    /// a stall's samples. Failed captures and samples of the loop idle in epoll are no evidence.
    static func analyze(frames: [StallReport.Frame], samples: [StallReport.Sample])
        -> (tree: [CallTreeNode], hottest: HottestStack?, topFrame: StallReport.FrameSummary?, signature: String?)
    {
        let evidence = samples.filter { $0.status == .ok && $0.idle != true && !$0.frames.isEmpty }.map(\.frames)
        let tree = callTree(evidence, frames: frames)
        let hottest = hottestStack(tree, total: evidence.count)
        var top: StallReport.FrameSummary?
        if let hottest, let innermostInApp = hottest.frames.first(where: { frames.indices.contains($0) && frames[$0].inApp }) {
            let frame = frames[innermostInApp]
            let (file, line) = location(of: frame.functionKey, in: evidence, frames: frames)
            top = StallReport.FrameSummary(symbol: frame.functionKey, module: frame.module, file: file ?? frame.file,
                                           line: line)
        }
        return (tree, hottest, top, hottest.map { signature($0.frames, frames: frames) })
    }

    /// Where a reader should look for `function`: the known line most samples of that function are at (the hottest
    /// stack's own address may sit on compiler-generated code, DWARF line 0), ties to the first seen; without any
    /// known line, the file alone.
    static func location(of function: String, in stacks: [[Int]], frames table: [StallReport.Frame])
        -> (file: String?, line: Int?)
    {
        var counts: [String: (count: Int, first: Int, file: String, line: Int)] = [:]
        var anyFile: String?
        var seen = 0
        for stack in stacks {
            // Once per sample: the innermost frame of that function in it.
            let ofFunction = stack.first { table.indices.contains($0) && table[$0].functionKey == function }
            guard let index = ofFunction else { continue }
            let frame = table[index]
            guard let file = frame.file else { continue }
            anyFile = anyFile ?? file
            guard let line = frame.line else { continue }
            let place = "\(file):\(line)"
            counts[place, default: (0, seen, file, line)].count += 1
            seen += 1
        }
        guard let best = counts.values.max(by: { ($0.count, -$0.first) < ($1.count, -$1.first) }) else {
            return (anyFile, nil)
        }
        return (best.file, best.line)
    }

    /// A sample of the loop waiting in epoll (the iteration ended just before the capture) is no evidence of a
    /// stall.
    static func isIdle(_ frames: [Int], in table: [StallReport.Frame]) -> Bool {
        frames.prefix(8).contains { index in
            guard table.indices.contains(index), let symbol = table[index].symbol else { return false }
            return symbol.contains("Looper.(waitForEvents") || symbol.contains("Looper.waitForEvents")
                || symbol == "cstallmon_epoll_wait"
        }
    }

    /// Merges stacks (innermost first) into a tree rooted at the outermost frames.
    static func callTree(_ stacks: [[Int]], frames table: [StallReport.Frame]) -> [CallTreeNode] {
        final class Node {
            var counts: [Int: Int] = [:]  // frame index → samples, to pick the representative frame
            var samples = 0
            var children: [String: Node] = [:]
            var order: [String] = []
        }
        let root = Node()
        for stack in stacks {
            var node = root
            for index in stack.reversed() where table.indices.contains(index) {
                let name = table[index].functionKey
                let child: Node
                if let existing = node.children[name] {
                    child = existing
                } else {
                    child = Node()
                    node.children[name] = child
                    node.order.append(name)
                }
                child.samples += 1
                child.counts[index, default: 0] += 1
                node = child
            }
        }
        func convert(_ node: Node) -> [CallTreeNode] {
            node.order.map { name in
                let child = node.children[name]!
                let frame = child.counts.max { ($0.value, -$0.key) < ($1.value, -$1.key) }!.key
                return CallTreeNode(frame: frame, samples: child.samples, children: convert(child))
                    }.sorted { $0.samples > $1.samples }
        }
        return convert(root)
    }

    /// Follows the heaviest child from the outermost frame down while more than half of all samples still agree
    /// (Tencent Matrix's "point stack"): the deepest frame most samples share.
    static func hottestStack(_ roots: [CallTreeNode], total: Int) -> HottestStack? {
        guard total > 0 else { return nil }
        var path: [Int] = []
        var samples = total
        var level = roots
        while let heaviest = level.first, heaviest.samples * 2 > total {
            path.append(heaviest.frame)
            samples = heaviest.samples
            level = heaviest.children
        }
        guard !path.isEmpty else {
            // No majority even at the outermost frame: the heaviest branch as far as it goes alone.
            guard var node = roots.first else { return nil }
            path.append(node.frame)
            samples = node.samples
            while let next = node.children.first, next.samples == node.samples {
                path.append(next.frame)
                node = next
            }
            return HottestStack(frames: path.reversed(), samples: samples, of: total)
        }
        return HottestStack(frames: path.reversed(), samples: samples, of: total)
    }

    /// A stable id for "this kind of stall": FNV-1a 64 of the function keys of the hottest stack's innermost in-app
    /// frames (up to 5), or of its innermost frames when none is in-app, each without the number of an async
    /// function's partial function (which an `await` added elsewhere in it would change). 16 hex digits.
    static func signature(_ stack: [Int], frames table: [StallReport.Frame]) -> String {
        let valid = stack.filter { table.indices.contains($0) }
        var chosen = valid.filter { table[$0].inApp }
        if chosen.isEmpty { chosen = valid }
        return combine(chosen.prefix(5).map {
            StallReport.Frame.withoutPartialFunctionPrefix(table[$0].functionKey)
        })
    }

    /// FNV-1a 64 of `keys`, each ended by a newline. 16 hex digits.
    static func combine(_ keys: [String]) -> String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for key in keys {
            for byte in key.utf8 {
                hash ^= UInt64(byte)
                hash = hash &* 0x0000_0100_0000_01B3
            }
            hash ^= 0x0A
            hash = hash &* 0x0000_0100_0000_01B3
        }
        let digits = String(hash, radix: 16)
        return String(repeating: "0", count: 16 - digits.count) + digits
    }
}
