package idx

import (
	"os"
	"testing"
)

// BenchmarkReadFashionMNIST reads the Fashion-MNIST training images (26 MB
// of gzip, 47 MB of pixels); the bytes per second are of decompressed data.
func BenchmarkReadFashionMNIST(b *testing.B) {
	const path = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"
	if _, err := os.Stat(path); err != nil {
		b.Skipf("Fashion-MNIST is not installed: %v", err)
	}
	b.SetBytes(60000 * 28 * 28)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ReadFile(path); err != nil {
			b.Fatal(err)
		}
	}
}
