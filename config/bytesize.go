package config

import (
	"fmt"
	"strconv"
	"strings"
)

// ByteSize is a size in bytes, written in YAML or the environment as a plain
// integer or with a unit: 512KiB, 64MiB, 5GiB (also KB/MB/GB, taken as powers of 1024).
type ByteSize int64

// Byte size units.
const (
	KiB ByteSize = 1 << 10
	MiB ByteSize = 1 << 20
	GiB ByteSize = 1 << 30
	TiB ByteSize = 1 << 40
)

// ParseByteSize parses "1048576", "512KiB", "64MiB", "5GiB", "1TiB".
func ParseByteSize(s string) (ByteSize, error) {
	t := strings.TrimSpace(s)
	units := []struct {
		suffix string
		mult   ByteSize
	}{
		{"TiB", TiB}, {"GiB", GiB}, {"MiB", MiB}, {"KiB", KiB},
		{"TB", TiB}, {"GB", GiB}, {"MB", MiB}, {"KB", KiB},
		{"T", TiB}, {"G", GiB}, {"M", MiB}, {"K", KiB}, {"B", 1},
	}
	mult := ByteSize(1)
	for _, u := range units {
		if strings.HasSuffix(strings.ToUpper(t), strings.ToUpper(u.suffix)) {
			t = strings.TrimSpace(t[:len(t)-len(u.suffix)])
			mult = u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a size (like 4MiB or 5GiB)", s)
	}
	if n > int64(1<<62)/int64(mult) {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return ByteSize(n) * mult, nil
}

func (b ByteSize) String() string {
	switch {
	case b >= GiB && b%GiB == 0:
		return fmt.Sprintf("%dGiB", b/GiB)
	case b >= MiB && b%MiB == 0:
		return fmt.Sprintf("%dMiB", b/MiB)
	case b >= KiB && b%KiB == 0:
		return fmt.Sprintf("%dKiB", b/KiB)
	}
	return strconv.FormatInt(int64(b), 10)
}
