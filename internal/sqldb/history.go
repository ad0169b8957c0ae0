package sqldb

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/guildhall/guildhall/internal/history"
)

// HistoryEvents returns the events of history.Types created after at, up
// to seq upTo, newest first: what a history answer undoes from the state
// as of upTo. The first seq after at is found on the created_at index, then
// the primary key's range from it is read (a scan down the keys from upTo,
// filtered on created_at, would read the whole log), scanned by hand:
// thousands of rows, whose data history decodes itself.
func (q Queries) HistoryEvents(ctx context.Context, at time.Time, upTo int64) ([]history.Event, error) {
	rows, err := q.Query(ctx, historyEvents, at.UnixMicro(), upTo, at.UnixMicro())
	if err != nil {
		return nil, fmt.Errorf("read events after %s: %w", at.Format(time.RFC3339Nano), err)
	}
	defer rows.Close()
	var out []history.Event
	for rows.Next() {
		var ev history.Event
		var created int64
		if err := rows.Scan(&ev.Seq, &ev.Type, &ev.Subject, &ev.Data, &created); err != nil {
			return nil, fmt.Errorf("read events after %s: %w", at.Format(time.RFC3339Nano), err)
		}
		ev.CreatedAt = time.UnixMicro(created).UTC()
		out = append(out, ev)
	}
	return out, rows.Err()
}

// historyEvents reads the events of history.Types in the range of seqs
// from the first after an instant, newest first.
var historyEvents = func() string {
	types := make([]string, len(history.Types))
	for i, t := range history.Types {
		types[i] = "'" + t + "'" // constants of history's: no quote in them
	}
	return "SELECT seq, type, subject, data, created_at FROM events " +
		"WHERE seq >= (SELECT MIN(seq) FROM events WHERE created_at > ?) AND seq <= ? AND created_at > ? " +
		"AND type IN (" + strings.Join(types, ", ") + ") ORDER BY seq DESC"
}()
