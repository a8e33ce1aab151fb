extension Array {
    /// The array in consecutive slices of `size` elements (the last one shorter), in order: a
    /// long list written to a database or Redis a bounded number to a statement.
    public func batches(of size: Int) -> [ArraySlice<Element>] {
        precondition(size > 0, "a batch holds at least one element")
        return stride(from: 0, to: count, by: size).map { self[$0..<Swift.min($0 + size, count)] }
    }
}
