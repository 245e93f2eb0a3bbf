import Foundation
import StallmonReport
import SwiftProtobuf

/// Stall samples as OTLP profiles (`opentelemetry/proto/profiles/v1development`, the Collector's
/// `POST /v1development/profiles`; an alpha signal, see ShippingReports): an `ExportProfilesServiceRequest` with one
/// dictionary for the batch and, per monitored process (its resource, as the logs have it), two profiles of the
/// same samples: `stall_time/nanoseconds` and `stalls/count` (`StallStacks` says how they are weighted). Each sample
/// carries the stall's start as its timestamp, its low-cardinality fields as attributes (`stallmon.loop`,
/// `stallmon.stall.class`, `stallmon.label`, `stallmon.stall.signature`) and, for a traced request, a link to its
/// trace and span.
package enum StallOTLPProfiles {
    package typealias Request = Opentelemetry_Proto_Collector_Profiles_V1development_ExportProfilesServiceRequest
    typealias Dictionary = Opentelemetry_Proto_Profiles_V1development_ProfilesDictionary

    /// The request for `reports`. `serviceName` as in the logs (default: the executable's name); `profileIDs`
    /// gives each profile its 16-byte id (random by default; the spec forbids all zeroes).
    package static func request(_ reports: [StallReport], serviceName: String?,
                                profileIDs: () -> Data = randomProfileID) -> Request {
        var stacks = StallStacks()
        struct ProcessKey: Hashable {
            var pid: Int32
            var hostname: String
            var executable: String
        }
        var order: [ProcessKey] = []
        var samplesOf: [ProcessKey: [Int]] = [:]
        var processOf: [ProcessKey: StallReport.ProcessDescription] = [:]
        for report in reports {
            let key = ProcessKey(pid: report.process.pid, hostname: report.process.hostname,
                                 executable: report.process.executable)
            if samplesOf[key] == nil {
                order.append(key)
                processOf[key] = report.process
            }
            let before = stacks.samples.count
            stacks.add(report)
            samplesOf[key, default: []] += Array(before..<stacks.samples.count)
        }
        var tables = Tables(stacks: &stacks)
        var request = Request()
        request.resourceProfiles = order.map { key in
            var resource = Opentelemetry_Proto_Profiles_V1development_ResourceProfiles()
            resource.resource.attributes = resourceAttributes(processOf[key]!, serviceName: serviceName)
            var scope = Opentelemetry_Proto_Profiles_V1development_ScopeProfiles()
            scope.scope.name = "stallmon"
            scope.scope.version = "0.1.0"
            let samples = samplesOf[key]!.map { tables.sample(stacks.samples[$0], stacks: stacks) }
            scope.profiles = [
                tables.profile(samples, value: \.nanoseconds, type: ("stall_time", "nanoseconds"), stacks: stacks,
                               id: profileIDs()),
                tables.profile(samples, value: \.stalls, type: ("stalls", "count"), stacks: stacks, id: profileIDs()),
            ]
            resource.scopeProfiles = [scope]
            return resource
        }
        request.dictionary = tables.dictionary(stacks)
        return request
    }

    package static func randomProfileID() -> Data {
        var generator = SystemRandomNumberGenerator()
        var bytes = (0..<16).map { _ in UInt8.random(in: 0...255, using: &generator) }
        if bytes.allSatisfy({ $0 == 0 }) { bytes[15] = 1 }
        return Data(bytes)
    }

    private static func resourceAttributes(_ process: StallReport.ProcessDescription, serviceName: String?)
        -> [Opentelemetry_Proto_Common_V1_KeyValue] {
        let executableName = process.executable.split(separator: "/").last.map(String.init) ?? process.executable
        var attributes = [
            keyValue("service.name", .stringValue(serviceName ?? executableName)),
            keyValue("host.name", .stringValue(process.hostname)),
            keyValue("process.pid", .intValue(Int64(process.pid))),
            keyValue("process.executable.name", .stringValue(executableName)),
            keyValue("process.executable.path", .stringValue(process.executable)),
        ]
        if let buildID = process.buildId {
            attributes.append(keyValue("process.executable.build_id.gnu", .stringValue(buildID)))
        }
        return attributes
    }

    private static func keyValue(_ key: String, _ value: Opentelemetry_Proto_Common_V1_AnyValue.OneOf_Value)
        -> Opentelemetry_Proto_Common_V1_KeyValue {
        var pair = Opentelemetry_Proto_Common_V1_KeyValue()
        pair.key = key
        pair.value.value = value
        return pair
    }

    /// The dictionary's attribute and link tables, built as samples are converted. Every table's entry 0 is its
    /// zero value, as the spec requires: indices into `StallStacks`' tables are shifted by one.
    private struct Tables {
        private var attributes: [Opentelemetry_Proto_Profiles_V1development_KeyValueAndUnit] = [.init()]
        private var attributeIndex: [StallStacks.Label: Int32] = [:]
        private var links: [Opentelemetry_Proto_Profiles_V1development_Link] = [.init()]
        private var linkIndex: [String: Int32] = [:]
        private let keys: [Int: Int]

        /// Label keys as the logs name the same fields.
        init(stacks: inout StallStacks) {
            var keys: [Int: Int] = [:]
            for (label, key) in [(StallStacks.LabelKey.loop, "stallmon.loop"),
                                 (StallStacks.LabelKey.stallClass, "stallmon.stall.class"),
                                 (StallStacks.LabelKey.label, "stallmon.label"),
                                 (StallStacks.LabelKey.signature, "stallmon.stall.signature")] {
                keys[stacks.intern(label)] = stacks.intern(key)
            }
            self.keys = keys
            for text in ["stall_time", "nanoseconds", "stalls", "count"] { _ = stacks.intern(text) }
        }

        struct Converted {
            var stack: Int32
            var attributes: [Int32]
            var link: Int32
            var stalls: Int64
            var nanoseconds: Int64
            var start: UInt64?
        }

        mutating func sample(_ sample: StallStacks.Sample, stacks: StallStacks) -> Converted {
            var indices: [Int32] = []
            for label in sample.labels {
                // The build id is the resource's (`process.executable.build_id.gnu`), not the sample's.
                guard let key = keys[label.key] else { continue }
                let attribute = StallStacks.Label(key: key, value: label.value)
                if let known = attributeIndex[attribute] {
                    indices.append(known)
                    continue
                }
                var entry = Opentelemetry_Proto_Profiles_V1development_KeyValueAndUnit()
                entry.keyStrindex = Int32(key)
                entry.value.stringValue = stacks.strings[label.value]
                attributes.append(entry)
                attributeIndex[attribute] = Int32(attributes.count - 1)
                indices.append(Int32(attributes.count - 1))
            }
            var link: Int32 = 0
            if let trace = sample.traceID.flatMap(Self.bytes), trace.count == 16,
               let span = sample.spanID.flatMap(Self.bytes), span.count == 8 {
                let key = sample.traceID! + sample.spanID!
                if let known = linkIndex[key] {
                    link = known
                } else {
                    var entry = Opentelemetry_Proto_Profiles_V1development_Link()
                    entry.traceID = trace
                    entry.spanID = span
                    links.append(entry)
                    link = Int32(links.count - 1)
                    linkIndex[key] = link
                }
            }
            return Converted(stack: Int32(sample.stack + 1), attributes: indices, link: link, stalls: sample.stalls,
                             nanoseconds: sample.nanoseconds, start: sample.start)
        }

        func profile(_ samples: [Converted], value: KeyPath<Converted, Int64>, type: (String, String),
                     stacks: StallStacks, id: Data) -> Opentelemetry_Proto_Profiles_V1development_Profile {
            var profile = Opentelemetry_Proto_Profiles_V1development_Profile()
            profile.sampleType.typeStrindex = Int32(stacks.strings.firstIndex(of: type.0) ?? 0)
            profile.sampleType.unitStrindex = Int32(stacks.strings.firstIndex(of: type.1) ?? 0)
            profile.periodType = profile.sampleType
            profile.profileID = id
            profile.samples = samples.map { converted in
                var sample = Opentelemetry_Proto_Profiles_V1development_Sample()
                sample.stackIndex = converted.stack
                sample.attributeIndices = converted.attributes
                sample.linkIndex = converted.link
                sample.values = [converted[keyPath: value]]
                if let start = converted.start { sample.timestampsUnixNano = [start] }
                return sample
            }
            let starts = samples.compactMap(\.start)
            if let first = starts.min() {
                profile.timeUnixNano = first
                profile.durationNano = (stacks.latestEnd ?? first) &- min(first, stacks.latestEnd ?? first)
            }
            return profile
        }

        func dictionary(_ stacks: StallStacks) -> Dictionary {
            var dictionary = Dictionary()
            dictionary.stringTable = stacks.strings
            dictionary.mappingTable = [.init()] + stacks.mappings.map { mapping in
                var converted = Opentelemetry_Proto_Profiles_V1development_Mapping()
                converted.memoryStart = mapping.start
                converted.memoryLimit = mapping.limit
                converted.filenameStrindex = Int32(mapping.file)
                return converted
            }
            dictionary.functionTable = [.init()] + stacks.functions.map { function in
                var converted = Opentelemetry_Proto_Profiles_V1development_Function()
                converted.nameStrindex = Int32(function.name)
                converted.systemNameStrindex = Int32(function.systemName)
                converted.filenameStrindex = Int32(function.file)
                return converted
            }
            dictionary.locationTable = [.init()] + stacks.locations.map { location in
                var converted = Opentelemetry_Proto_Profiles_V1development_Location()
                converted.mappingIndex = location.mapping.map { Int32($0 + 1) } ?? 0
                converted.address = location.address
                converted.lines = location.lines.map { line in
                    var convertedLine = Opentelemetry_Proto_Profiles_V1development_Line()
                    convertedLine.functionIndex = Int32(line.function + 1)
                    convertedLine.line = line.line
                    return convertedLine
                }
                return converted
            }
            dictionary.stackTable = [.init()] + stacks.stacks.map { stack in
                var converted = Opentelemetry_Proto_Profiles_V1development_Stack()
                converted.locationIndices = stack.map { Int32($0 + 1) }
                return converted
            }
            dictionary.attributeTable = attributes
            dictionary.linkTable = links
            return dictionary
        }

        /// Lowercase or uppercase hex as bytes, or nil.
        static func bytes(_ hex: String) -> Data? {
            guard hex.count % 2 == 0 else { return nil }
            var bytes: [UInt8] = []
            var index = hex.startIndex
            while index < hex.endIndex {
                let next = hex.index(index, offsetBy: 2)
                guard let byte = UInt8(hex[index..<next], radix: 16) else { return nil }
                bytes.append(byte)
                index = next
            }
            return Data(bytes)
        }
    }
}

extension StallOTLPProfiles {
    /// The Collector's answer (`partial_success`: profiles it rejected, and why).
    package typealias Response = Opentelemetry_Proto_Collector_Profiles_V1development_ExportProfilesServiceResponse
}
