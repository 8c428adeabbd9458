module github.com/zeroeng/zeroeng/samples/hooks/go

go 1.26
