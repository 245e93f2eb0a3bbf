/// Samples and frames are most of a report (a 120 ms stall has a dozen samples and two dozen frames): they are read
/// member by member (`SkimmedDecodable`). Each reading gives what the synthesized `init(from:)` gives: required
/// members present and of their type, optional ones nil when absent or null, unknown members ignored.

extension StallReport.Sample: SkimmedDecodable {
    private static let names: [StaticString] = [
        "offsetMs", "status", "frames", "truncated", "label", "state", "idle", "unknownImage", "waiting",
        "holderState", "holderStatus", "holderFrames", "holderWaiting", "awaitChainTruncated",
    ]

    package init(skimming object: SkimmedJSONDecoder.Object) throws {
        var offsetMs: Double?
        var status: CaptureStatus?
        var frames: [Int]?
        var truncated: Bool?
        var label, state, holderState, holderWaiting: String?
        var idle, unknownImage, awaitChainTruncated: Bool?
        var waiting: Int?
        var holderStatus: CaptureStatus?
        var holderFrames: [Int]?
        try object.forEachMember(named: Self.names) { index, value in
            switch index {
            case 0: offsetMs = try value.double()
            case 1: status = try Self.status(value)
            case 2: frames = try value.integers()
            case 3: truncated = try value.bool()
            case 4: label = try value.optional { try $0.string() }
            case 5: state = try value.optional { try $0.string() }
            case 6: idle = try value.optional { try $0.bool() }
            case 7: unknownImage = try value.optional { try $0.bool() }
            case 8: waiting = try value.optional { try $0.integer() }
            case 9: holderState = try value.optional { try $0.string() }
            case 10: holderStatus = try value.optional { try Self.status($0) }
            case 11: holderFrames = try value.optional { try $0.integers() }
            case 12: holderWaiting = try value.optional { try $0.string() }
            default: awaitChainTruncated = try value.optional { try $0.bool() }
            }
        }
        guard let offsetMs, let status, let frames, let truncated else { throw SkimmedJSONDecoder.Unsupported() }
        self.init(offsetMs: offsetMs, status: status, frames: frames, truncated: truncated, label: label, state: state,
                  idle: idle)
        self.unknownImage = unknownImage
        self.waiting = waiting
        self.holderState = holderState
        self.holderStatus = holderStatus
        self.holderFrames = holderFrames
        self.holderWaiting = holderWaiting
        self.awaitChainTruncated = awaitChainTruncated
    }

    private static func status(_ value: SkimmedJSONDecoder.Value) throws -> CaptureStatus {
        guard let status = CaptureStatus(rawValue: try value.string()) else { throw SkimmedJSONDecoder.Unsupported() }
        return status
    }
}

extension StallReport.Frame: SkimmedDecodable {
    private static let names: [StaticString] = [
        "address", "image", "module", "buildId", "offset", "symbol", "symbolOffset", "file", "line", "inApp",
        "inlined", "async",
    ]

    package init(skimming object: SkimmedJSONDecoder.Object) throws {
        var address, module, buildId, offset, symbol, file: String?
        var image, symbolOffset, line: Int?
        var inApp, inlined, async: Bool?
        try object.forEachMember(named: Self.names) { index, value in
            switch index {
            case 0: address = try value.string()
            case 1: image = try value.optional { try $0.integer() }
            case 2: module = try value.optional { try $0.string() }
            case 3: buildId = try value.optional { try $0.string() }
            case 4: offset = try value.optional { try $0.string() }
            case 5: symbol = try value.optional { try $0.string() }
            case 6: symbolOffset = try value.optional { try $0.integer() }
            case 7: file = try value.optional { try $0.string() }
            case 8: line = try value.optional { try $0.integer() }
            case 9: inApp = try value.bool()
            case 10: inlined = try value.optional { try $0.bool() }
            default: async = try value.optional { try $0.bool() }
            }
        }
        guard let address, let inApp else { throw SkimmedJSONDecoder.Unsupported() }
        self.init(address: address, image: image, module: module, buildId: buildId, offset: offset, symbol: symbol,
                  symbolOffset: symbolOffset, file: file, line: line, inApp: inApp, inlined: inlined, async: async)
    }
}
