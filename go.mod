module github.com/zeroeng/zeroeng

go 1.26
