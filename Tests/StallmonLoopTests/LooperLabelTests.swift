import StallmonLoop
import Synchronization
import Testing

@Suite("LooperLabel interning")
struct LooperLabelTests {
    @Test("the same string interns to the same id; different strings to different ids")
    func sameStringSameID() {
        let first = LooperLabel("label-tests.alpha")
        let second = LooperLabel("label-tests.alpha")
        let other = LooperLabel("label-tests.beta")
        #expect(first.id == second.id)
        #expect(first == second)
        #expect(first.id != other.id)
        #expect(first != other)
        #expect(first.id != 0)
    }

    @Test("the name round-trips, including through the id alone")
    func nameRoundTrips() {
        for name in ["label-tests.round-trip", "label-tests.ünïcødé ✓", "label-tests. spaced "] {
            let label = LooperLabel(name)
            #expect(label.name == name)
            #expect(label.description == name)
            #expect(LooperLabel(id: label.id).name == name)
            #expect(LooperLabel(id: label.id) == label)
        }
    }

    @Test("a string literal is the same label as init(_:)")
    func stringLiteral() {
        let literal: LooperLabel = "label-tests.literal"
        #expect(literal == LooperLabel("label-tests.literal"))
        #expect(literal.name == "label-tests.literal")
    }

    @Test(".none is id 0 and the empty name; the empty string interns to it")
    func noneLabel() {
        #expect(LooperLabel.none.id == 0)
        #expect(LooperLabel.none.name == "")
        #expect(LooperLabel("") == .none)
        #expect(LooperLabel(id: 0) == .none)
    }

    @Test("an id that was never interned has the empty name")
    func unknownID() {
        #expect(LooperLabel(id: UInt32.max).name == "")
    }

    @Test("the loop's default labels have their documented names")
    func defaultLabels() {
        #expect(LooperLabel.perform.name == "perform")
        #expect(LooperLabel.timer.name == "timer")
        #expect(LooperLabel.fileDescriptor.name == "fd")
        #expect(LooperLabel.customSource.name == "custom-source")
        #expect(LooperLabel.internal.name == "looper.internal")
        let ids: Set<UInt32> = [LooperLabel.perform.id, LooperLabel.timer.id, LooperLabel.fileDescriptor.id,
                                LooperLabel.customSource.id, LooperLabel.internal.id]
        #expect(ids.count == 5)
        #expect(!ids.contains(0))
    }

    @Test("interning the same names from several threads agrees on the ids")
    func concurrentInterning() {
        let names = (0..<50).map { "label-tests.concurrent-\($0)" }
        let results = Locked<[[UInt32]]>([])
        let threads = (0..<4).map { thread in
            TestThread {
                // Each thread interns in a different order.
                let order = thread.isMultiple(of: 2) ? Array(names.indices) : Array(names.indices.reversed())
                var ids = Array(repeating: UInt32(0), count: names.count)
                for index in order { ids[index] = LooperLabel(names[index]).id }
                results.append(ids)
            }
        }
        for thread in threads { #expect(thread.join()) }
        let all = results.value
        #expect(all.count == 4)
        #expect(all.allSatisfy { $0 == all[0] })
        #expect(Set(all[0]).count == names.count)
        for (index, id) in all[0].enumerated() {
            #expect(LooperLabel(id: id).name == names[index])
        }
    }
}
