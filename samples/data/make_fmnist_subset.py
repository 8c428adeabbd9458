"""Cuts the embedded Fashion-MNIST subset (samples/data/fmnist-*.gz) out of Debian's
dataset-fashion-mnist package: the first 3000 training and first 1000 test images, as idx files.
Fashion-MNIST is (c) Zalando SE, MIT license. Run with /usr/bin/python3."""
import gzip
D = "/usr/share/datasets/fashion-mnist/"
def cut(src, dst, n, header, item):
    raw = gzip.open(D + src).read()
    head = bytearray(raw[:header])
    head[4:8] = n.to_bytes(4, "big")
    with gzip.GzipFile(dst, "wb", mtime=0, compresslevel=9) as f:
        f.write(bytes(head) + raw[header:header + n * item])
cut("train-images-idx3-ubyte.gz", "fmnist-train-images-idx3-ubyte.gz", 3000, 16, 784)
cut("train-labels-idx1-ubyte.gz", "fmnist-train-labels-idx1-ubyte.gz", 3000, 8, 1)
cut("t10k-images-idx3-ubyte.gz", "fmnist-test-images-idx3-ubyte.gz", 1000, 16, 784)
cut("t10k-labels-idx1-ubyte.gz", "fmnist-test-labels-idx1-ubyte.gz", 1000, 8, 1)
