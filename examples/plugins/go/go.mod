module github.com/gatectl/gatectl/examples/plugins/go

go 1.24
