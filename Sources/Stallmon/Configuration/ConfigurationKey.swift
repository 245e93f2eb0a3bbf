/// One key of the config file and of the environment (`STALLMON_<KEY>`): its name, whether its value is a secret
/// (never shown in an error), and how its textual value sets the configuration. `StallMonitorConfiguration.table`
/// lists every key once, grouped by concern; the key list, the parser, the secret list and the check that
/// `config/stallmon.conf` documents every key all read that table.
struct ConfigurationKey: Sendable {
    typealias Apply = @Sendable (inout StallMonitorConfiguration, String) throws(ConfigurationError) -> Void

    let name: String
    let isSecret: Bool
    let apply: Apply

    init(_ name: String, secret: Bool = false, _ apply: @escaping Apply) {
        self.name = name
        isSecret = secret
        self.apply = apply
    }

    // MARK: - Value kinds

    /// A number of milliseconds (fractions allowed).
    static func milliseconds(_ name: String,
                             _ field: WritableKeyPath<StallMonitorConfiguration, Duration> & Sendable)
        -> ConfigurationKey {
        ConfigurationKey(name) { (configuration, value) throws(ConfigurationError) in
            configuration[keyPath: field] = try Parse.milliseconds(value, key: name)
        }
    }

    /// An integer (its range is checked by `validate()`).
    static func integer(_ name: String, _ field: WritableKeyPath<StallMonitorConfiguration, Int> & Sendable)
        -> ConfigurationKey {
        ConfigurationKey(name) { (configuration, value) throws(ConfigurationError) in
            configuration[keyPath: field] = try Parse.integer(value, key: name)
        }
    }

    /// `on` or `off` (also `true`/`false`, `yes`/`no`, `1`/`0`).
    static func onOff(_ name: String, _ field: WritableKeyPath<StallMonitorConfiguration, Bool> & Sendable)
        -> ConfigurationKey {
        ConfigurationKey(name) { (configuration, value) throws(ConfigurationError) in
            guard let on = Parse.onOff(value) else {
                throw .invalid(key: name, value: value, reason: "expected on or off")
            }
            configuration[keyPath: field] = on
        }
    }

    /// A positive number of hours (< 1,000,000).
    static func hours(_ name: String, _ field: WritableKeyPath<StallMonitorConfiguration, Duration> & Sendable)
        -> ConfigurationKey {
        ConfigurationKey(name) { (configuration, value) throws(ConfigurationError) in
            guard let hours = Double(value), hours > 0, hours < 1e6 else {
                throw .invalid(key: name, value: value, reason: "expected a positive number of hours (< 1000000)")
            }
            configuration[keyPath: field] = .seconds(hours * 3600)
        }
    }

    /// A string; empty means none.
    static func optionalText(_ name: String,
                             _ field: WritableKeyPath<StallMonitorConfiguration, String?> & Sendable)
        -> ConfigurationKey {
        ConfigurationKey(name) { configuration, value in configuration[keyPath: field] = value.isEmpty ? nil : value }
    }

    /// One of `Choice`'s raw values, in any case.
    static func choice<Choice: RawRepresentable<String> & Sendable>(
        _ name: String, _ field: WritableKeyPath<StallMonitorConfiguration, Choice> & Sendable, expected: String
    ) -> ConfigurationKey {
        ConfigurationKey(name) { (configuration, value) throws(ConfigurationError) in
            guard let choice = Choice(rawValue: value.lowercased()) else {
                throw .invalid(key: name, value: value, reason: "expected \(expected)")
            }
            configuration[keyPath: field] = choice
        }
    }

    /// How textual values are read.
    enum Parse {
        static func milliseconds(_ value: String, key: String) throws(ConfigurationError) -> Duration {
            guard let number = Double(value), number.isFinite else {
                throw .invalid(key: key, value: value, reason: "expected a number of milliseconds")
            }
            guard abs(number) < 1e12 else {  // ~31 years; beyond, the nanoseconds overflow
                throw .invalid(key: key, value: value, reason: "out of range")
            }
            return .nanoseconds(Int64((number * 1_000_000).rounded()))
        }

        static func integer(_ value: String, key: String) throws(ConfigurationError) -> Int {
            guard let number = Int(value) else { throw .invalid(key: key, value: value, reason: "expected an integer") }
            return number
        }

        /// nil when `value` is neither on nor off.
        static func onOff(_ value: String) -> Bool? {
            switch value.lowercased() {
            case "on", "true", "yes", "1": true
            case "off", "false", "no", "0": false
            default: nil
            }
        }
    }
}
