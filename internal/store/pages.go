package store

// filteredPage reads a page of up to limit items from a range read in its
// order, where some filters are checked on each item read rather than
// served by the range's index. It asks read for limit+1 items after the
// position at, then twice, four times as many … while the page is
// unfinished, and for at most bound items in all, so that filters few
// items pass cost a bounded read, not the range to its end: such a page
// may end short, even empty, with the position of the last item it
// checked. next is the position to go on from (the zero P when the range
// ended); pos gives an item's position.
func filteredPage[T any, P comparable](limit, bound int, at P, pos func(T) P,
	read func(after P, n int) (items []T, passes []bool, err error)) (page []T, next P, err error) {
	out := make([]T, 0, min(limit, 64))
	var end P
	grow, asked := 1, 0
	for {
		if asked == bound {
			return out, at, nil
		}
		want := min((limit+1)*grow, bound-asked)
		asked += want
		items, passes, err := read(at, want)
		if err != nil {
			return nil, end, err
		}
		for i, it := range items {
			at = pos(it)
			if !passes[i] {
				continue
			}
			if len(out) == limit { // one more than the page: it goes on
				return out, pos(out[limit-1]), nil
			}
			out = append(out, it)
		}
		if len(items) < want {
			return out, end, nil // the range read to its end
		}
		grow *= 2
	}
}
