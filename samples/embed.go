// Package samples holds the small data files that zeroeng embeds, so that
// the default job runs with no download: a 3000/1000-image cut of
// Fashion-MNIST (Zalando SE, MIT license; see data/make_fmnist_subset.py).
package samples

import "embed"

// FashionMNIST holds data/fmnist-{train,test}-{images-idx3,labels-idx1}-ubyte.gz.
//
//go:embed data/fmnist-*.gz
var FashionMNIST embed.FS
