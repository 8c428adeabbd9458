module github.com/zeroeng/zeroeng/sdk/go

go 1.26
