package fresh

import (
	"sync/atomic"
	"unsafe"
)

// The wal-index header: how the SQLite change log learns, without a
// statement, that nothing was committed since it last asked.
//
// In WAL mode every connection to a database file, in any process, shares
// the wal-index, the file "-shm" beside the database, mapped into memory.
// It starts with a header in two copies (SQLite's file-format document,
// "WAL-Index Format"), which every commit rewrites before the commit
// returns: its change counter goes up by one and its last frame moves (a
// checkpoint that restarts the log changes its salts). A writer writes the
// second copy, then the first; a reader that reads the first, then the
// second, and finds them equal has read a header that is whole, as SQLite's
// own readers do. So if the header is the same as just before the log was
// last read, nothing was committed since: the log's question is answered by
// reading 96 bytes of shared memory rather than running a statement (PRAGMA
// data_version began and ended a read transaction, and took and released a
// lock on the wal-index, each time).
//
// A header that moved sends the question to the log at once (one
// statement); a torn one, or a wal-index that cannot be mapped, to PRAGMA
// data_version, which says whether to read the log. The mapping is opened
// only after the log's own connection has read the database, and closed
// before that connection is: while a connection of any process uses the
// wal-index, SQLite does not reset it (only the first connection to open
// it does, which it tells by a lock on the file; walindex_unix.go keeps
// that lock in place until the store's connections are closed). A mapped file whose header is not a wal-index's is
// not used.

// walHeaderWords is the header's size in 32-bit words: 48 bytes a copy.
const walHeaderWords = 12

type walHeader [walHeaderWords]uint32

// walIndex is a read-only mapping of the start of a wal-index.
type walIndex struct {
	mem   []byte
	unmap func([]byte) error
}

// header reads the header; ok is false when the copies differ (a commit is
// writing it).
func (w *walIndex) header() (h walHeader, ok bool) {
	words := unsafe.Slice((*uint32)(unsafe.Pointer(&w.mem[0])), 2*walHeaderWords)
	for i := range h {
		h[i] = atomic.LoadUint32(&words[i])
	}
	for i := range h {
		if atomic.LoadUint32(&words[walHeaderWords+i]) != h[i] {
			return h, false
		}
	}
	return h, true
}

// walIndexVersion is the header's first word in every wal-index SQLite
// writes (WALINDEX_MAX_VERSION).
const walIndexVersion = 3007000

// valid reports whether the mapping holds a wal-index: its header whole,
// of the version SQLite writes, and initialized (the isInit byte, at
// offset 12).
func (w *walIndex) valid() bool {
	h, ok := w.header()
	return ok && h[0] == walIndexVersion && w.mem[12] != 0
}

func (w *walIndex) close() error {
	if w == nil || w.mem == nil {
		return nil
	}
	err := w.unmap(w.mem)
	w.mem = nil
	return err
}
