// The documentation's Vapor 4 middleware, verbatim (VaporServiceTests checks that it is): compiled by this package,
// used by the service.
import Stallmon
import Vapor

/// Names every request's async stalls after its route (`GET /users/:id`: the matched pattern, not the raw path).
/// Register it on a route group, `app.grouped(StallLabelMiddleware())`: a group's middleware runs once the route is
/// matched, so `request.route` is known (in the global `app.middleware` it is still nil: no label).
struct StallLabelMiddleware: AsyncMiddleware {
    func respond(to request: Request, chainingTo next: any AsyncResponder) async throws -> Response {
        guard let route = request.route else { return try await next.respond(to: request) }
        let path = route.path.map(\.description).joined(separator: "/")
        return try await StallLabel.withValue("\(request.method) /\(path)") {
            try await next.respond(to: request)
        }
    }
}
