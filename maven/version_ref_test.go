package maven

// The comparison over parsed item lists that compareKeys replaced, kept as the
// reference it is checked against (FuzzCompareVersions, TestVersionKeysAgree): it
// follows Maven's ListItem.compareTo step by step, where compareKeys walks the
// keys' encoding.

// refCompareListNull is ListItem.compareTo(null) for the list at level k of v: the first
// item that does not compare equal to null decides (MNG-6964), sub-lists included.
func refCompareListNull(v *version, k int) int {
	for ; k < len(v.levels); k++ {
		for _, s := range v.levels[k] {
			if r := compareScalarNull(s); r != 0 {
				return r
			}
		}
	}
	return 0
}

// refCompareParsed is ListItem.compareTo(ListItem) for the top lists of a and b. A
// sub-list is always the last item of its list, so comparing two sub-lists is a tail
// call: the loop moves both sides one level down instead of recursing.
func refCompareParsed(a, b *version) int {
	for ka, kb := 0, 0; ; ka, kb = ka+1, kb+1 {
		la, lb := a.levels[ka], b.levels[kb]
		subA, subB := ka+1 < len(a.levels), kb+1 < len(b.levels)
		n := max(len(la), len(lb))
		for i := 0; i < n; i++ {
			var r int
			switch {
			case i < len(la) && i < len(lb):
				r = compareScalars(la[i], lb[i])
			case i < len(la): // b's item is its sub-list, or null
				if i == len(lb) && subB {
					r = scalarVsList(la[i])
				} else {
					r = compareScalarNull(la[i])
				}
			default: // a's item is its sub-list, or null
				if i == len(la) && subA {
					r = -scalarVsList(lb[i])
				} else {
					r = -compareScalarNull(lb[i])
				}
			}
			if r != 0 {
				return r
			}
		}
		// Both lists are past their scalars: the next items are the sub-lists.
		switch {
		case len(la) == len(lb) && subA && subB:
			continue // sub-list against sub-list
		case len(la) == len(lb) && subA:
			return refCompareListNull(a, ka+1)
		case len(la) == len(lb) && subB:
			return -refCompareListNull(b, kb+1)
		case len(la) > len(lb) && subA: // a's sub-list against null (b's sub-list, if any, was met above)
			return refCompareListNull(a, ka+1)
		case len(lb) > len(la) && subB:
			return -refCompareListNull(b, kb+1)
		}
		return 0
	}
}
