import Foundation

extension StallMonitorConfiguration {
    /// Every key the config file and the environment accept, in the order of `config/stallmon.conf`.
    public static let keys = table.map(\.name)

    /// The environment variable naming a config file to load.
    public static let configFileVariable = "STALLMON_CONFIG"

    /// Loads `path` (if given) over the defaults, then applies `STALLMON_<KEY>` variables from `environment`, then
    /// validates. Errors name the file and line, or the variable, and the offending value.
    public static func load(file path: String?,
                            environment: [String: String] = ProcessInfo.processInfo.environment,
                            base: StallMonitorConfiguration = StallMonitorConfiguration())
        throws(ConfigurationError) -> StallMonitorConfiguration
    {
        var configuration = base
        if let path {
            let text: String
            do {
                text = try String(contentsOfFile: path, encoding: .utf8)
            } catch {
                throw ConfigurationError("cannot read config file \(path): \(error.localizedDescription)")
            }
            for (key, value, line) in try parse(text, source: path) {
                do {
                    try configuration.set(key, to: value)
                } catch {
                    throw ConfigurationError("\(path):\(line): \(error.description)")
                }
            }
        }
        for (name, value) in environment.sorted(by: { $0.key < $1.key }) where name.hasPrefix("STALLMON_") {
            if name == configFileVariable { continue }
            let key = String(name.dropFirst("STALLMON_".count)).lowercased()
            guard keys.contains(key) else {
                throw ConfigurationError("unknown environment variable \(name) (known: "
                    + keys.map { "STALLMON_" + $0.uppercased() }.joined(separator: ", ") + ")")
            }
            do {
                try configuration.set(key, to: value)
            } catch {
                throw ConfigurationError("environment \(name): \(error.description)")
            }
        }
        try configuration.validate()
        return configuration
    }

    /// `key = value` lines. Returns (key, value, line number).
    ///
    /// - Blank lines and lines whose first non-blank character is `#` are ignored.
    /// - An unquoted value runs to the end of the line; `#` after whitespace starts a comment, so `ab#cd` is a
    ///   value and `100  # ms` is `100`. Surrounding whitespace is dropped.
    /// - A value in double quotes is taken as written: `#` and spaces are part of it, `\"` is a quote and `\\` a
    ///   backslash; only whitespace and a comment may follow the closing quote.
    /// - Errors never show a line that could hold a secret: not a line without `=`, not an unknown key (a token
    ///   typed on a line of its own, `=` padding and all), not the value of a secret key.
    static func parse(_ text: String, source: String) throws(ConfigurationError) -> [(String, String, Int)] {
        var entries: [(String, String, Int)] = []
        for (index, rawLine) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let location = "\(source):\(index + 1)"
            let content = String(rawLine).trimmingWhitespace()
            if content.isEmpty || content.hasPrefix("#") { continue }
            guard let equals = content.firstIndex(of: "=") else {
                throw ConfigurationError("\(location): expected `key = value`, found " + Self.describeForError(content))
            }
            let key = String(content[..<equals]).trimmingWhitespace()
            guard keys.contains(key) else {
                throw ConfigurationError("\(location): unknown config key (the line is not shown: it may hold a secret)"
                    + (Self.nearestKey(to: key).map { "; did you mean `\($0)`?" } ?? ".")
                    + " Known keys: " + keys.joined(separator: ", "))
            }
            let value: String
            do throws(ValueSyntaxError) {
                value = try Self.parseValue(content[content.index(after: equals)...])
            } catch {
                throw ConfigurationError("\(location): \(key): \(error.reason)"
                    + (secretKeys.contains(key) ? " (the value is not shown: it is a secret)" : ""))
            }
            entries.append((key, value, index + 1))
        }
        return entries
    }

    private struct ValueSyntaxError: Error {
        let reason: String
    }

    /// The value after `=` (see `parse`).
    private static func parseValue(_ text: Substring) throws(ValueSyntaxError) -> String {
        var rest = text.drop { $0 == " " || $0 == "\t" }
        guard rest.first == "\"" else {
            var end = rest.endIndex
            var previous: Character = " "
            for index in rest.indices {
                if rest[index] == "#" && previous.isWhitespace {
                    end = index
                    break
                }
                previous = rest[index]
            }
            return String(rest[..<end]).trimmingWhitespace()
        }
        rest.removeFirst()
        var value = ""
        var closed = false
        while let character = rest.popFirst() {
            if character == "\"" {
                closed = true
                break
            }
            if character == "\\" {
                guard let escaped = rest.popFirst(), escaped == "\"" || escaped == "\\" else {
                    throw ValueSyntaxError(reason: "in a quoted value, a backslash must be followed by \" or \\")
                }
                value.append(escaped)
            } else {
                value.append(character)
            }
        }
        guard closed else { throw ValueSyntaxError(reason: "the quoted value has no closing quote") }
        let trailing = String(rest).trimmingWhitespace()
        guard trailing.isEmpty || trailing.hasPrefix("#") else {
            throw ValueSyntaxError(reason: "only a comment may follow the closing quote")
        }
        return value
    }

    /// The known key closest to a misspelt `key` (at most 3 edits), to suggest without echoing what was typed.
    static func nearestKey(to key: String) -> String? {
        let typed = Array(key.lowercased().utf8)
        guard !typed.isEmpty, typed.count <= 64 else { return nil }
        var best: (key: String, distance: Int)?
        for candidate in keys {
            let distance = editDistance(typed, Array(candidate.utf8))
            if distance <= 3 && distance < (best?.distance ?? .max) { best = (candidate, distance) }
        }
        return best?.key
    }

    private static func editDistance(_ a: [UInt8], _ b: [UInt8]) -> Int {
        var previous = Array(0...b.count)
        for i in 1...a.count {
            var current = [i] + Array(repeating: 0, count: b.count)
            for j in stride(from: 1, through: b.count, by: 1) {
                current[j] = Swift.min(previous[j] + 1, current[j - 1] + 1,
                                       previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
            }
            previous = current
        }
        return previous[b.count]
    }

    /// Keys whose values are secrets: never shown in an error.
    static let secretKeys = Set(table.filter(\.isSecret).map(\.name))

    /// A malformed line as an error may show it: in full when it begins with a key whose value is no secret;
    /// otherwise only its first word if that is a known key, else nothing (it may be a token typed on its own).
    static func describeForError(_ line: String) -> String {
        let firstWord = String(line.prefix { !$0.isWhitespace && $0 != ":" })
        if keys.contains(firstWord) && !secretKeys.contains(firstWord) { return "`\(line)`" }
        if keys.contains(firstWord) { return "`\(firstWord) …` (the value is not shown: it is a secret)" }
        return "a line that is not shown (it may hold a secret)"
    }

    /// Sets one knob from its textual form.
    mutating func set(_ key: String, to value: String) throws(ConfigurationError) {
        guard let entry = Self.table.first(where: { $0.name == key }) else {
            throw ConfigurationError("unknown config key `\(key)`")
        }
        try entry.apply(&self, value)
    }
}
