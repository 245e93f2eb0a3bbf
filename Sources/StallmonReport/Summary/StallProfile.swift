/// All samples of many reports merged, for flame graphs: by function, outermost frame at the root. Idle samples
/// (the loop back in epoll) and failed captures are left out.
public struct FlameNode: Codable, Sendable, Equatable {
    public var name: String
    /// Samples whose stack passes through this node.
    public var value: Int
    public var children: [FlameNode]
}

public enum StallProfile {
    /// The samples of `reports` as stacks of function names, outermost first. Inlined functions carry the `_[i]`
    /// suffix of `stackcollapse-perf.pl --inline`, which flamegraph.pl colours apart.
    public static func stacks(_ reports: [StallReport]) -> [[String]] {
        reports.flatMap { report in
            report.samples.compactMap { sample -> [String]? in
                guard sample.status == .ok, sample.idle != true, !sample.frames.isEmpty else { return nil }
                return sample.frames.reversed().compactMap { index in
                    guard report.frames.indices.contains(index) else { return nil }
                    let frame = report.frames[index]
                    return frame.functionKey + (frame.inlined == true ? "_[i]" : "")
                }
            }
        }
    }

    /// Brendan Gregg's folded format: one line per distinct stack, `outer;…;inner count`, sorted.
    public static func folded(_ reports: [StallReport]) -> String {
        var counts: [String: Int] = [:]
        for stack in stacks(reports) {
            let line = stack.map { $0.replacingOccurrences(of: ";", with: ":").replacingOccurrences(of: "\n", with: " ") }
                .joined(separator: ";")
            counts[line, default: 0] += 1
        }
        return counts.keys.sorted().map { "\($0) \(counts[$0]!)\n" }.joined()
    }

    /// The merged tree under a root named "all".
    public static func flameTree(_ reports: [StallReport]) -> FlameNode {
        final class Node {
            var value = 0
            var children: [String: Node] = [:]
        }
        let root = Node()
        for stack in stacks(reports) {
            root.value += 1
            var node = root
            for name in stack {
                let child = node.children[name] ?? Node()
                node.children[name] = child
                child.value += 1
                node = child
            }
        }
        func convert(_ name: String, _ node: Node) -> FlameNode {
            FlameNode(name: name, value: node.value,
                      children: node.children.map { convert($0.key, $0.value) }.sorted { $0.value > $1.value })
        }
        return convert("all", root)
    }
}
