module github.com/zeroeng/zeroeng/samples/programs/go

go 1.26

require github.com/zeroeng/zeroeng/sdk/go v0.0.0

replace github.com/zeroeng/zeroeng/sdk/go => ../../../sdk/go
