// Package packaging holds what gatectl ships beside its binary (the systemd
// unit, the Grafana dashboard) and the tests that keep them, and the
// repository's Dockerfile, true to the code: the flags they pass exist, the
// build is static, the metrics the dashboard plots are ones the server serves.
package packaging
