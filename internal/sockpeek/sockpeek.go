// Package sockpeek looks into a socket's receive queue without reading
// from it and without blocking: whether bytes wait there, or the peer has
// closed the connection. The upstream client uses it to find bytes past a
// body's end; the proxy to find clients that left while their request
// waited.
package sockpeek

// State is what a socket's receive side holds.
type State int

// States of Peek.
const (
	// Unknown: the platform cannot peek, or the descriptor is unusable.
	Unknown State = iota
	// Empty: nothing is waiting; the peer is there.
	Empty
	// Pending: at least one byte is waiting.
	Pending
	// Closed: the peer closed (its FIN came) or reset the connection.
	Closed
)
