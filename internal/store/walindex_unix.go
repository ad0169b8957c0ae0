//go:build unix

package store

import (
	"os"
	"sync"
	"syscall"
)

// shmFiles keeps, for the life of the process, the descriptor of every
// wal-index this process mapped, by device and inode. The locks SQLite
// takes on a wal-index are POSIX locks, which closing any descriptor of
// the file drops for the whole process, whoever took them: one of them
// tells other processes that the wal-index is in use, and without it the
// next process to open the database would reset the wal-index under this
// one. So a descriptor opened here is never closed, as SQLite's own unix
// layer keeps the descriptors it no longer uses; one per database file.
var shmFiles = struct {
	sync.Mutex
	m map[[2]uint64]*os.File
}{m: map[[2]uint64]*os.File{}}

// openWALIndex maps the header of the wal-index at path read-only, or
// returns nil when there is none to map (not in WAL mode, not yet created,
// not a wal-index).
func openWALIndex(path string) *walIndex {
	f := shmFile(path)
	if f == nil {
		return nil
	}
	fi, err := f.Stat()
	if err != nil || fi.Size() < 2*walHeaderWords*4 {
		return nil // reading past the end of a mapped file faults
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, os.Getpagesize(), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil
	}
	w := &walIndex{mem: mem, unmap: syscall.Munmap}
	if !w.valid() {
		_ = w.close()
		return nil
	}
	return w
}

// shmFile returns the kept descriptor of the file at path, opening it the
// first time.
func shmFile(path string) *os.File {
	shmFiles.Lock()
	defer shmFiles.Unlock()
	if fi, err := os.Stat(path); err == nil {
		if f := shmFiles.m[fileKey(fi)]; f != nil {
			return f
		}
	}
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	fi, err := f.Stat()
	if err != nil {
		return nil // kept open all the same: closing it would drop the locks
	}
	key := fileKey(fi)
	if kept := shmFiles.m[key]; kept != nil {
		return kept // replaced between the two looks; f stays open, unused
	}
	shmFiles.m[key] = f
	return f
}

func fileKey(fi os.FileInfo) [2]uint64 {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return [2]uint64{}
	}
	return [2]uint64{uint64(st.Dev), uint64(st.Ino)} // Dev is narrower on some platforms
}
