package secrets

import (
	"io"
	"sync"
)

// maxHeld bounds what a Writer holds back beyond a secret's length: a run of overlapping secrets
// longer than this is written out once it is whole in what is held.
const maxHeld = 64 << 10

// Writer wraps w so that what is written through it is redacted, including a secret split across
// two Writes: the last bytes of each Write (fewer than the longest form of a secret r knows) are
// held back until the next Write shows whether they begin a secret. Close writes what is held
// back; it does not close w. The Writer is safe for concurrent use. Once w has failed, every
// later Write and Close answers that error.
func (r *Redactor) Writer(w io.Writer) io.WriteCloser {
	return &writer{r: r, w: w}
}

type writer struct {
	r   *Redactor
	w   io.Writer
	mu  sync.Mutex
	buf []byte // the bytes held back, then what a Write appends to them
	err error  // w's first error
}

func (wr *writer) Write(p []byte) (int, error) {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	if wr.err != nil {
		return 0, wr.err
	}
	m := wr.r.m.Load()
	if m == nil { // no secret known, so none held back either
		return wr.write(p, len(p))
	}
	wr.buf = append(wr.buf, p...)
	data := wr.buf
	// Bytes from cut on may begin a secret that the next Write completes; a secret that begins
	// before cut lies whole in data.
	cut := max(0, len(data)-(m.longest-1))
	spans := find(m, data, nil)
	// Write up to cut, and hold back whole a span that straddles it so that it is found whole
	// again next time; unless that span has been held too long.
	upto, n := cut, 0
	for _, sp := range spans {
		if sp.start >= cut {
			break
		}
		if sp.end > cut {
			if len(data)-sp.start <= m.longest+maxHeld {
				upto = sp.start
				break
			}
			upto = sp.end
		}
		n++
	}
	if upto > 0 {
		if _, err := wr.write(replace(nil, data[:upto], spans[:n]), len(p)); err != nil {
			return 0, err
		}
	}
	wr.buf = append(wr.buf[:0], data[upto:]...)
	return len(p), nil
}

// Close writes what is held back, redacted. It does not close the wrapped writer.
func (wr *writer) Close() error {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	if wr.err != nil {
		return wr.err
	}
	out := wr.r.RedactBytes(wr.buf)
	if len(out) > 0 {
		if _, err := wr.write(out, 0); err != nil {
			return err
		}
	}
	wr.buf = wr.buf[:0]
	return nil
}

// write writes b whole to w and answers n, or records w's error.
func (wr *writer) write(b []byte, n int) (int, error) {
	if _, err := wr.w.Write(b); err != nil {
		wr.err = err
		return 0, err
	}
	return n, nil
}
