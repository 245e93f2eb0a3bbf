// Needs the `Upload` trait (on by default): the HTTP client, SwiftNIO and compress-nio come with it.
#if Upload
import AsyncHTTPClient
import CompressNIO
import NIOCore
import NIOHTTP1
import NIOPosix
import Stallmon
import StallmonReport
import Synchronization

/// POSTs gzip-compressed batches with async-http-client on one event-loop thread of its own. Called from the
/// uploader thread, which blocks on the result; `cancelInFlight()` from another thread abandons the request (used by
/// graceful shutdown after its deadline).
final class HTTPTransport: Sendable {
    private let group: MultiThreadedEventLoopGroup
    private let client: HTTPClient
    private let inFlight = Mutex<HTTPClient.Task<HTTPClient.Response>?>(nil)

    init(connectTimeout: Duration) {
        group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        var configuration = HTTPClient.Configuration(
            redirectConfiguration: .disallow,
            timeout: .init(connect: .nanoseconds(connectTimeout.nanosecondsClamped)))
        configuration.decompression = .enabled(limit: .ratio(50))
        client = HTTPClient(eventLoopGroupProvider: .shared(group), configuration: configuration)
    }

    /// Sends `body` (gzip-compressed on the wire) and waits at most `timeout` for the whole exchange.
    func post(url: String, body: [UInt8], contentType: String, headers: [(String, String)],
              timeout: Duration) -> DeliveryOutcome {
        var compressed: ByteBuffer
        do {
            var plain = ByteBuffer(bytes: body)
            compressed = try plain.compress(with: .gzip())
        } catch {
            return .transportFailure("gzip failed: \(error)")
        }
        var requestHeaders = HTTPHeaders()
        requestHeaders.add(name: "Content-Type", value: contentType)
        requestHeaders.add(name: "Content-Encoding", value: "gzip")
        requestHeaders.add(name: "User-Agent", value: "stallmon/0.1")
        for (name, value) in headers { requestHeaders.add(name: name, value: value) }
        let request: HTTPClient.Request
        do {
            request = try HTTPClient.Request(url: url, method: .POST, headers: requestHeaders,
                                             body: .byteBuffer(compressed))
        } catch {
            return .transportFailure("bad request URL \(UploadConfiguration.redacted(endpoint: url))")
        }
        let deadline = NIODeadline.now() + .nanoseconds(timeout.nanosecondsClamped)
        let task = client.execute(request: request, delegate: ResponseAccumulator(request: request),
                                  deadline: deadline)
        inFlight.withLock { $0 = task }
        defer { inFlight.withLock { $0 = nil } }
        do {
            let response = try task.futureResult.wait()
            var bytes: [UInt8] = []
            if var buffer = response.body {
                bytes = buffer.readBytes(length: min(buffer.readableBytes, 4096)) ?? []
            }
            return .response(status: Int(response.status.code),
                             retryAfter: response.headers.first(name: "Retry-After"),
                             body: String(decoding: bytes, as: UTF8.self), bytes: bytes)
        } catch {
            return .transportFailure(Self.describe(error))
        }
    }

    /// Abandons the request in progress, if any; its outcome becomes a transport failure (retried later).
    func cancelInFlight() {
        inFlight.withLock { $0 }?.cancel()
    }

    func shutdown() {
        try? client.syncShutdown()
        try? group.syncShutdownGracefully()
    }

    private static func describe(_ error: Error) -> String {
        if let error = error as? HTTPClientError {
            switch error {
            case .deadlineExceeded, .readTimeout, .connectTimeout: return "timed out"
            case .cancelled: return "cancelled"
            case .remoteConnectionClosed: return "connection closed by peer"
            default:
                // Never print header values: one of them is the bearer token (validation refuses bad ones anyway).
                let text = "\(error)"
                return text.contains("HeaderFieldValues") ? "a header value the HTTP client refuses (not shown)" : text
            }
        }
        if let error = error as? IOError { return "I/O error: \(error.description)" }
        if let error = error as? NIOConnectionError {
            return "cannot connect to \(error.host):\(error.port)"
        }
        return String(describing: error)
    }
}
#endif  // Upload
