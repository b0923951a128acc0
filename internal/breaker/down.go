package breaker

import "errors"

// A downError is what calls get while the circuit is open: ErrUnavailable,
// with the servers found down and why ("127.0.0.1:6379: dial: connect:
// connection refused", "10.0.0.7:6379: no reply to PING within 500ms"),
// so that the caller's error says what its log would.
type downError struct{ detail string }

func (e *downError) Error() string { return ErrUnavailable.Error() + ": " + e.detail }
func (e *downError) Unwrap() error { return ErrUnavailable }

// downFor is what calls are told after err opened the circuit: err itself
// if it names the servers (a check's, a dial's), or else err after the
// client's servers.
func (b *Breaker) downFor(err error) *downError {
	var d *downError
	if errors.As(err, &d) {
		return d
	}
	return &downError{b.log.client + ": " + err.Error()}
}

// unavailable is the error of a call the open circuit turns away. It is
// made when the circuit opens, not per call: a call turned away costs no
// allocation.
func (b *Breaker) unavailable() error {
	if d := b.down.Load(); d != nil {
		return d
	}
	return ErrUnavailable
}

// Err returns the error of a call the circuit turns away now: nil while
// it is closed.
func (b *Breaker) Err() error {
	if !b.Open() {
		return nil
	}
	return b.unavailable()
}
