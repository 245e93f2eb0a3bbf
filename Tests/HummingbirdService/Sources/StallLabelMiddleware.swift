// The README's Hummingbird 2 middleware, verbatim (HummingbirdServiceTests checks that it is): compiled by this
// package, used by the service.
import Hummingbird
import Stallmon

/// Names every request's async stalls after its route (`GET /users/{id}`: the matched pattern, not the raw path).
/// Add it before the routes, `router.add(middleware: StallLabelMiddleware())`: a router's middleware runs once the
/// route is matched, so `context.endpointPath` is known; a request to an unknown route gets no label. A service that
/// traces adds it after Hummingbird's `TracingMiddleware()`, inside the request's span: its reports then carry the
/// request's trace and span ids too.
struct StallLabelMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context,
                next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let route = context.endpointPath else { return try await next(request, context) }
        return try await StallLabel.withValue("\(request.method) \(route)") {
            try await next(request, context)
        }
    }
}
