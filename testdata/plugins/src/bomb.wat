;; bomb.wat: a classifier that grows its memory until it cannot, then traps.
(module
  (memory (export "memory") 1)
  (func (export "gate_abi_v1"))
  (func (export "gate_classify") (param i32) (result i32)
    (loop $more
      (br_if $more (i32.ge_s (memory.grow (i32.const 16)) (i32.const 0))))
    unreachable))
