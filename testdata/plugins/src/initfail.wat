;; initfail.wat: gate_init refuses its config.
(module
  (memory (export "memory") 1)
  (func (export "gate_abi_v1"))
  (func (export "gate_init") (param i32) (result i32) (i32.const 3))
  (func (export "gate_classify") (param i32) (result i32) (i32.const 1)))
