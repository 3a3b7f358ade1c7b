package reports

import (
	"slices"

	"gonum.org/v1/gonum/stat"
)

// KSDistance is the two-sample Kolmogorov-Smirnov distance of two samples (any order): the
// largest gap between their empirical CDFs, 0 for identical distributions, 1 for disjoint
// ones (and when either is empty).
func KSDistance(a, b []float64) float64 {
	if len(a) == 0 || len(b) == 0 {
		return 1
	}
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return stat.KolmogorovSmirnov(a, nil, b, nil)
}

// LevelSamples returns, per level label, the successful requests' TTFT and TPOT in ms.
func LevelSamples(recs []Record) (ttft, tpot map[string][]float64) {
	ttft, tpot = map[string][]float64{}, map[string][]float64{}
	for _, r := range recs {
		if r.Error != nil || r.TTFTMs == nil {
			continue
		}
		ttft[r.Level] = append(ttft[r.Level], *r.TTFTMs)
		if r.TPOTMs != nil {
			tpot[r.Level] = append(tpot[r.Level], *r.TPOTMs)
		}
	}
	return ttft, tpot
}
