package hotkeys

// A window is one Space-Saving summary: at most Capacity monitored keys,
// each in a slot that stays put while it is monitored, and a min-heap of
// the slots by reads, whose root is the key a newcomer replaces. The heap
// holds slot numbers and each slot its place in the heap, so that sifting
// moves int32s and never touches the map.
type window struct {
	slots []slot
	heap  []int32
	index map[string]int32 // key → slot
}

type slot struct {
	key string
	Counts
	pos int32 // in heap
}

func newWindow() *window {
	return &window{
		slots: make([]slot, 0, Capacity),
		heap:  make([]int32, 0, Capacity),
		index: make(map[string]int32, Capacity),
	}
}

// reset empties w, keeping its memory.
func (w *window) reset() {
	clear(w.slots) // drop the keys' strings
	w.slots, w.heap = w.slots[:0], w.heap[:0]
	clear(w.index)
}

func (w *window) add(key string, d Counts) {
	if i, ok := w.index[key]; ok {
		sl := &w.slots[i]
		sl.add(d)
		w.down(int(sl.pos)) // its reads grew: it may now be below a child
		return
	}
	if len(w.slots) < cap(w.slots) {
		i := int32(len(w.slots))
		w.slots = append(w.slots, slot{key: key, Counts: d, pos: int32(len(w.heap))})
		w.heap = append(w.heap, i)
		w.index[key] = i
		w.up(len(w.heap) - 1)
		return
	}
	// Space-Saving: the newcomer replaces the least-read key and inherits
	// its reads, an upper bound of what the newcomer may have had while
	// it was not monitored; its other counts start afresh.
	i := w.heap[0]
	sl := &w.slots[i]
	inherited := sl.Reads
	delete(w.index, sl.key)
	w.index[key] = i
	*sl = slot{key: key, Counts: d, pos: 0}
	sl.Reads += inherited
	w.down(0)
}

func (w *window) less(a, b int) bool {
	return w.slots[w.heap[a]].Reads < w.slots[w.heap[b]].Reads
}

func (w *window) swap(a, b int) {
	w.heap[a], w.heap[b] = w.heap[b], w.heap[a]
	w.slots[w.heap[a]].pos = int32(a)
	w.slots[w.heap[b]].pos = int32(b)
}

func (w *window) up(j int) {
	for j > 0 {
		p := (j - 1) / 2
		if !w.less(j, p) {
			return
		}
		w.swap(j, p)
		j = p
	}
}

func (w *window) down(j int) {
	n := len(w.heap)
	for {
		c := 2*j + 1
		if c >= n {
			return
		}
		if c+1 < n && w.less(c+1, c) {
			c++
		}
		if !w.less(c, j) {
			return
		}
		w.swap(j, c)
		j = c
	}
}
