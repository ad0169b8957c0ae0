package sqldb

import (
	"context"
	"fmt"
	"strings"
)

// A batch of writes that runs optimistically (no savepoints: see
// writer.commit; several requests, or one on PostgreSQL) holds back the
// rows its requests insert through Tx.InsertRow, and writes those of one
// statement together, as one INSERT of many rows, before the
// transaction's next statement of any kind and at the batch's end; on
// PostgreSQL a few go in the statement of the batch's events. There each
// statement is a round trip (two context switches, a system call each
// way, the backend's executor started once per statement): a group commit
// of 30 creates writes its rows in one, a create committed alone its row
// and its event in one. The rows' triggers fire per row, as for rows
// inserted one by one.
//
// Nothing a request reads can tell: every statement of the transaction
// writes the held rows first, so reads inside the transaction see them.
// Like the batch's events, the rows are written as the batch's own
// statements, outside the span of any one write.
// What the request cannot get is the INSERT's own error: a row that
// violates a constraint fails the whole statement, and then the batch runs
// again, each request in its own savepoint with its rows inserted at once,
// so each gets its own answer (a 409 for a name taken). A failure is kept
// (heldRows.err) even when a request's code does not return it, so the
// batch cannot commit past it.

// RowChunk bounds the rows of one INSERT of held rows, so that at most
// RowChunk texts of each are prepared.
const RowChunk = 64

// mergeRows bounds the rows held, and the events, that PostgreSQL writes
// in one statement (the rows in a WITH before the events' INSERT): a
// transaction of a create or a few saves a round trip, and at most
// mergeRows² texts of each RowInsert are prepared. Bigger batches write
// their rows on their own, the round trip shared by many.
const mergeRows = 4

// RowInsert is the INSERT of one row, in a form whose rows can be written
// together: the statement's head up to VALUES, and one row of values with
// a ? per argument.
type RowInsert struct {
	texts [RowChunk + 1]string // the INSERT of n rows (index n)
	// withEvents[k][n] writes k rows, then n events RETURNING their seqs
	// (PostgreSQL).
	withEvents [mergeRows + 1][mergeRows + 1]string
	width      int // arguments per row
}

// NewRowInsert builds the INSERT of head (up to and with VALUES) and row
// (one parenthesized row of values).
func NewRowInsert(head, row string) *RowInsert {
	ins := &RowInsert{width: strings.Count(row, "?")}
	for n := 1; n <= RowChunk; n++ {
		ins.texts[n] = head + " " + strings.Repeat(row+", ", n-1) + row
	}
	for k := 1; k <= mergeRows; k++ {
		for n := 1; n <= mergeRows; n++ {
			ins.withEvents[k][n] = "WITH held AS (" + ins.texts[k] + ") " + eventsInsert[n]
		}
	}
	return ins
}

// heldRows are the rows a transaction holds back, of one RowInsert at a
// time (rows of another first write these).
type heldRows struct {
	hold bool    // set for an optimistic batch (of one request too, on PostgreSQL)
	q    Queries // the transaction's, to write them
	ins  *RowInsert
	args []any
	n    int
	err  error // the first failure to write held rows
}

// InsertRow inserts one row of ins with args. In a batch run without
// savepoints (of several requests, or of one on PostgreSQL) the row is
// held, and written with the others before the transaction's next
// statement, or with its events (see heldRows); its error then fails the
// batch, which runs again with each request's rows inserted at once.
// Otherwise it is inserted now, and its error returned.
func (tx *Tx) InsertRow(ctx context.Context, ins *RowInsert, args ...any) error {
	if len(args) != ins.width {
		return fmt.Errorf("insert %q: %d arguments for %d", FirstLine(ins.texts[1]), len(args), ins.width)
	}
	h := tx.held
	if h == nil || !h.hold {
		_, err := tx.Exec(ctx, ins.texts[1], args...)
		return err
	}
	if h.ins != ins {
		if err := h.flush(ctx); err != nil {
			return err
		}
		h.ins = ins
	}
	h.args = append(h.args, args...)
	h.n++
	tx.wrote(ins.texts[1])
	return nil
}

// withEvents returns the statement that writes the rows held and n
// events, and its arguments, the rows' first, and forgets the rows; ""
// when they do not go together (on SQLite, which has no INSERT in a WITH,
// or too many of either).
func (h *heldRows) withEvents(postgres bool, n int) (string, []any) {
	if h == nil || !postgres || h.n == 0 || h.n > mergeRows || n > mergeRows {
		return "", nil
	}
	text, args := h.ins.withEvents[h.n][n], h.args
	h.ins, h.args, h.n = nil, nil, 0
	return text, args
}

// failed keeps err, the failure of a statement that wrote rows held.
func (h *heldRows) failed(err error) {
	if h.err == nil {
		h.err = fmt.Errorf("insert held rows: %w", err)
	}
}

// flush writes the rows held, if any.
func (h *heldRows) flush(ctx context.Context) error {
	if h == nil || h.n == 0 {
		return nil
	}
	ins, all, n := h.ins, h.args, h.n
	h.ins, h.n = nil, 0
	defer func() { clear(all); h.args = all[:0] }()
	args := all
	for n > 0 {
		k := min(n, RowChunk)
		if _, err := h.q.run(ctx, ins.texts[k], args[:k*ins.width]...); err != nil {
			h.failed(err)
			return h.err
		}
		args, n = args[k*ins.width:], n-k
	}
	return nil
}

// end writes the rows still held at the end of the batch, and returns the
// first failure to write any.
func (h *heldRows) end(ctx context.Context) error {
	if h == nil {
		return nil
	}
	if err := h.flush(ctx); err != nil {
		return err
	}
	return h.err
}
