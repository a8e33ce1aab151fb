import Glibc

/// Writes `text` and a newline straight to standard output (write(2), no stdio buffer): it
/// shows at once on a terminal and through a pipe. Never `print` then `fflush(nil)`: that
/// flush also takes the lock of standard input, which a thread waiting for a typed line holds,
/// so output would wait for the next line typed.
func writeLine(_ text: String) {
    var bytes = Array((text + "\n").utf8)
    var offset = 0
    while offset < bytes.count {
        let written = bytes.withUnsafeMutableBytes { buffer in
            Glibc.write(STDOUT_FILENO, buffer.baseAddress! + offset, buffer.count - offset)
        }
        if written > 0 {
            offset += written
        } else if written < 0 && errno == EINTR {
            continue
        } else {
            return
        }
    }
}
