package device

// TopKer is implemented by devices with a selection kernel for torch.topk
// (optional, as the window kernels are): into values and indices (src's
// shape with k along axis), the first k elements of each row in Sort's
// order (descending when largest), exactly what Sort and keeping the first
// k give, without sorting whole rows (the top 50 of a vocabulary of 50,257
// logits). The tensor layer sorts on devices without it.
type TopKer interface {
	TopK(values, indices, src View, axis, k int, largest bool) error
}
