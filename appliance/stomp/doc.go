// Package stomp is Herald's STOMP 1.0/1.1/1.2 frame codec.
//
// It knows frames, headers, escaping and limits, and nothing of sockets,
// sessions or destinations: a [Reader] turns bytes from any io.Reader into
// [Frame] values, [AppendFrame] turns frames back into bytes. The server in
// package appliance and the client in package stomp/client both use it, and
// FuzzReader feeds it arbitrary input.
//
// Contract of the decoder:
//   - EOLs between frames are heart-beats; ReadFrame reports them as a nil
//     frame with a nil error so the caller can note the peer is alive.
//   - LF and CRLF line endings are both accepted.
//   - Repeated headers are kept in order; [Headers.Get] returns the first, as
//     the specification requires.
//   - A content-length header makes the body exactly that many octets (NULs
//     allowed); without one the body ends at the first NUL.
//   - Header escaping follows the version set on the Reader: none for 1.0,
//     \n \c \\ for 1.1, and also \r for 1.2. CONNECT, STOMP and CONNECTED
//     frames are never unescaped (STOMP 1.2, "Value Encoding"). An undefined
//     escape is an error.
//   - A NUL anywhere in a header line is an error, in every version.
//
// Contract of the encoder: a header the version cannot carry exactly is left
// out of the frame, never rewritten ([Writable]): one holding a NUL; where
// nothing is escaped, one holding LF or CR or with a colon in its key; in
// 1.1, one holding CR.
//   - Every error is a *Error carrying a short reason suitable for the
//     "message" header of an ERROR frame; after an error the stream is not
//     resynchronised: the connection must be closed.
package stomp
