;; trap.wat: a classifier that traps on every call.
(module
  (memory (export "memory") 1)
  (func (export "gate_abi_v1"))
  (func (export "gate_classify") (param i32) (result i32) unreachable))
