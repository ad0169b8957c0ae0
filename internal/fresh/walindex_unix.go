//go:build unix

package fresh

import (
	"os"
	"sync"
	"syscall"
)

// shmFiles holds the descriptor of every wal-index this process mapped, by
// device and inode, with the number of stores using it. The locks SQLite
// takes on a wal-index are POSIX locks, which closing any descriptor of
// the file drops for the whole process, whoever took them: one of them
// tells other processes that the wal-index is in use, and without it the
// next process to open the database would reset the wal-index under this
// one. So a descriptor opened here is closed only when the last store on
// the file has closed its connections (Store.Close), as SQLite's own unix
// layer keeps the descriptors it no longer uses until its last connection
// to the file is gone.
var shmFiles = struct {
	sync.Mutex
	m map[[2]uint64]*keptFile
}{m: map[[2]uint64]*keptFile{}}

type keptFile struct {
	f    *os.File
	refs int
}

// openWALIndex maps the header of the wal-index at path read-only, or
// returns nil when there is none to map (not in WAL mode, not yet created,
// not a wal-index). release gives the file back: it must be called once the
// store's connections are closed, whether or not the mapping was made.
func openWALIndex(path string) (w *walIndex, release func()) {
	k, key := keepShmFile(path)
	if k == nil {
		return nil, func() {}
	}
	release = func() {
		shmFiles.Lock()
		defer shmFiles.Unlock()
		if k.refs--; k.refs == 0 {
			delete(shmFiles.m, key)
			_ = k.f.Close()
		}
	}
	fi, err := k.f.Stat()
	if err != nil || fi.Size() < 2*walHeaderWords*4 {
		return nil, release // reading past the end of a mapped file faults
	}
	mem, err := syscall.Mmap(int(k.f.Fd()), 0, os.Getpagesize(), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, release
	}
	w = &walIndex{mem: mem, unmap: syscall.Munmap}
	if !w.valid() {
		_ = w.close()
		return nil, release
	}
	return w, release
}

// keepShmFile returns the kept descriptor of the file at path, opening it
// the first time, and counts one more user of it.
func keepShmFile(path string) (*keptFile, [2]uint64) {
	shmFiles.Lock()
	defer shmFiles.Unlock()
	if fi, err := os.Stat(path); err == nil {
		if k := shmFiles.m[fileKey(fi)]; k != nil {
			k.refs++
			return k, fileKey(fi)
		}
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, [2]uint64{}
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, [2]uint64{} // f stays open: closing it would drop the locks
	}
	key := fileKey(fi)
	if k := shmFiles.m[key]; k != nil {
		k.refs++
		return k, key // replaced between the two looks; f stays open, unused
	}
	k := &keptFile{f: f, refs: 1}
	shmFiles.m[key] = k
	return k, key
}

func fileKey(fi os.FileInfo) [2]uint64 {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return [2]uint64{}
	}
	return [2]uint64{uint64(st.Dev), uint64(st.Ino)} // Dev is narrower on some platforms
}
