import SwiftProtobuf

/// Stall samples as pprof's `profile.proto` (github.com/google/pprof, proto/profile.proto): what `go tool pprof`,
/// Grafana Pyroscope and every pprof reader open. Two sample types, `stalls/count` and `stall_time/nanoseconds` (the
/// default), weighted as `StallStacks` says; labels `loop`, `class`, `label`, `signature`, `build_id` and, for a
/// traced request, `span_id`. The trace id stays out: a profile store makes a series of each distinct label value,
/// and Pyroscope keeps `span_id` per sample (its span profiles) rather than as a series.
package enum StallPprof {
    /// The serialized (uncompressed) profile; pprof files are gzipped by their writer.
    package static func serialized(_ stacks: StallStacks) throws -> [UInt8] {
        try profile(stacks).serializedBytes()
    }

    package static func profile(_ stacks: StallStacks) -> Perftools_Profiles_Profile {
        var stacks = stacks
        let count = (stacks.intern("stalls"), stacks.intern("count"))
        let time = (stacks.intern("stall_time"), stacks.intern("nanoseconds"))
        let spanKey = stacks.intern(StallStacks.LabelKey.spanID)
        var spanValues: [String: Int] = [:]
        for sample in stacks.samples {
            if let span = sample.spanID, !span.isEmpty, spanValues[span] == nil { spanValues[span] = stacks.intern(span) }
        }
        var profile = Perftools_Profiles_Profile()
        profile.sampleType = [valueType(count), valueType(time)]
        profile.defaultSampleType = Int64(time.0)
        profile.periodType = valueType(time)
        profile.mapping = stacks.mappings.enumerated().map { index, mapping in
            var converted = Perftools_Profiles_Mapping()
            converted.id = UInt64(index + 1)
            converted.memoryStart = mapping.start
            converted.memoryLimit = mapping.limit
            converted.filename = Int64(mapping.file)
            converted.buildID = Int64(mapping.buildID)
            converted.hasFunctions_p = true
            converted.hasFilenames_p = true
            converted.hasLineNumbers_p = true
            converted.hasInlineFrames_p = true
            return converted
        }
        profile.function = stacks.functions.enumerated().map { index, function in
            var converted = Perftools_Profiles_Function()
            converted.id = UInt64(index + 1)
            converted.name = Int64(function.name)
            converted.systemName = Int64(function.systemName)
            converted.filename = Int64(function.file)
            return converted
        }
        profile.location = stacks.locations.enumerated().map { index, location in
            var converted = Perftools_Profiles_Location()
            converted.id = UInt64(index + 1)
            converted.mappingID = location.mapping.map { UInt64($0 + 1) } ?? 0
            converted.address = location.address
            converted.line = location.lines.map { line in
                var convertedLine = Perftools_Profiles_Line()
                convertedLine.functionID = UInt64(line.function + 1)
                convertedLine.line = line.line
                return convertedLine
            }
            return converted
        }
        let locationIDs = stacks.stacks.map { $0.map { UInt64($0 + 1) } }
        // Stalls of one stack with the same labels (and span, when traced) are one sample, their values summed: what
        // pprof readers do on reading anyway, and a profile of 100,000 stalls the size of its distinct stacks.
        struct Key: Hashable {
            var stack: Int
            var labels: [StallStacks.Label]
            var span: String?
        }
        var sampleOf: [Key: Int] = [:]
        var samples: [Perftools_Profiles_Sample] = []
        for sample in stacks.samples {
            let key = Key(stack: sample.stack, labels: sample.labels, span: sample.spanID.flatMap { $0.isEmpty ? nil : $0 })
            if let index = sampleOf[key] {
                samples[index].value[0] &+= sample.stalls
                // Saturated: each stall's time fits an Int64, a sum of them may not.
                samples[index].value[1] = samples[index].value[1] > Int64.max - sample.nanoseconds ? Int64.max
                    : samples[index].value[1] + sample.nanoseconds
                continue
            }
            var converted = Perftools_Profiles_Sample()
            converted.locationID = locationIDs[sample.stack]
            converted.value = [sample.stalls, sample.nanoseconds]
            converted.label = sample.labels.map { label(key: $0.key, value: $0.value) }
            if let span = key.span, let value = spanValues[span] {
                converted.label.append(label(key: spanKey, value: value))
            }
            sampleOf[key] = samples.count
            samples.append(converted)
        }
        profile.sample = samples
        profile.stringTable = stacks.strings
        if let start = stacks.earliestStart, let end = stacks.latestEnd {
            profile.timeNanos = Int64(clamping: start)
            profile.durationNanos = Int64(clamping: end &- min(start, end))
        }
        return profile
    }

    private static func valueType(_ pair: (Int, Int)) -> Perftools_Profiles_ValueType {
        var type = Perftools_Profiles_ValueType()
        type.type = Int64(pair.0)
        type.unit = Int64(pair.1)
        return type
    }

    private static func label(key: Int, value: Int) -> Perftools_Profiles_Label {
        var label = Perftools_Profiles_Label()
        label.key = Int64(key)
        label.str = Int64(value)
        return label
    }
}
