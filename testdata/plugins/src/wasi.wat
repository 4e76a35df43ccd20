;; wasi.wat: uses WASI. It answers RATE_LIMIT with retryAfterMs = the number of
;; environment variables plus the number of arguments (both must be 0 in the
;; sandbox), after writing to stdout.
(module
  (import "wasi_snapshot_preview1" "environ_sizes_get" (func $env (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "args_sizes_get" (func $args (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
  (import "gate" "output_write" (func $out (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "{\"class\":\"RATE_LIMIT\",\"retryAfterMs\":")
  (data (i32.const 64) "hello from wasi\n")
  (func (export "gate_abi_v1"))
  (func (export "gate_classify") (param $n i32) (result i32)
    ;; iovec at 128: {ptr 64, len 16}
    (i32.store (i32.const 128) (i32.const 64))
    (i32.store (i32.const 132) (i32.const 16))
    (drop (call $write (i32.const 1) (i32.const 128) (i32.const 1) (i32.const 136)))
    (drop (call $env (i32.const 200) (i32.const 204)))
    (drop (call $args (i32.const 208) (i32.const 212)))
    ;; digit = env count + arg count (0..9), then "}"
    (i32.store8 (i32.const 37) (i32.add (i32.const 48)
      (i32.add (i32.load (i32.const 200)) (i32.load (i32.const 208)))))
    (i32.store8 (i32.const 38) (i32.const 125))
    (drop (call $out (i32.const 0) (i32.const 39)))
    (i32.const 0)))
