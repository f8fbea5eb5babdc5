package main

import (
	"reflect"
	"testing"
)

func TestPreferredIsMustIncludeThenLowestNaturalIDs(t *testing.T) {
	cases := []struct {
		available, must []string
		size            int
		want            []string
	}{
		{[]string{"gpu3", "gpu1", "gpu2"}, nil, 2, []string{"gpu1", "gpu2"}},
		{[]string{"gpu10", "gpu2", "gpu9"}, nil, 2, []string{"gpu2", "gpu9"}},
		{[]string{"gpu0", "gpu1", "gpu5"}, []string{"gpu5"}, 2, []string{"gpu5", "gpu0"}},
		{[]string{"b", "a"}, nil, 5, []string{"a", "b"}},
	}
	for _, c := range cases {
		if got := preferred(c.available, c.must, c.size); !reflect.DeepEqual(got, c.want) {
			t.Errorf("preferred(%v, %v, %d) = %v, want %v", c.available, c.must, c.size, got, c.want)
		}
	}
}
