// Package heapq is the binary min-heap the simulator's clocks run on: entries ordered by
// (At, Seq), where At is a time or a counter and Seq breaks ties, so equal times come out in
// a fixed order and a run is deterministic. The sim's event queue, the engine's timers and
// the radix cache's eviction order share it; Queue adds a FIFO beside a heap for the entries
// pushed in time order (the sim's network hops, the engine's deadlines).
//
// It is typed, not container/heap, because container/heap boxes every element into an
// interface and calls Less through it, a cost the event queue would pay once per event.
package heapq
