;; forbidden.wat: a classifier importing a function no gate/v1 host provides.
(module
  (import "wasi_snapshot_preview1" "fd_write" (func (param i32 i32 i32 i32) (result i32)))
  (import "env" "open_socket" (func $sock (param i32) (result i32)))
  (import "gate" "input_read" (func (param i32)))
  (memory (export "memory") 1)
  (func (export "gate_abi_v1"))
  (func (export "gate_classify") (param i32) (result i32)
    (call $sock (i32.const 0))))
