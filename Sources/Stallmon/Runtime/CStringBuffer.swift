/// A C string a C function copies into a buffer on the stack (no allocation for the buffer): `fill` gets the buffer
/// and its capacity and returns the string's length, or a negative value when there is none. Nil then, or when the
/// bytes are not UTF-8.
func readCString(capacity: Int, _ fill: (UnsafeMutablePointer<CChar>, Int) -> Int) -> String? {
    withUnsafeTemporaryAllocation(of: CChar.self, capacity: capacity) { buffer in
        guard let base = buffer.baseAddress, fill(base, buffer.count) >= 0 else { return nil }
        return String(validatingCString: base)
    }
}
