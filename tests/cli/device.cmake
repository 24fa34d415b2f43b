# tests/cli/device.cmake — `ctxlab grads --device cuda` against `--device cpu`: for every
# encoding (none, learned, sinusoidal, rope, xpos, alibi, kerple, t5, sandwich, shaw, xl,
# deberta, tupe, rnn, floater, complex-order, fire, cope) and every RoPE scaling (pi, ntk, dynamic-ntk, yarn,
# rerope, leaky-rerope, llama3, longrope, self-extend; the ReRoPE / Self-Extend window 8 < T = 32 so both
# branches run; longrope past its L = 16), the sliding window and attention sinks (rope, alibi, t5,
# learned, cope with `--window 8 --sinks 3`; kerple with the plain window), the loss within 1e-5 relative and every
# gradient within 1e-4 (tests/python/device_checks.py). Registered in builds with the CUDA backend: in the
# emulator build (CI) the kernels run on the CPU and the test must pass; in a real CUDA build it
# runs on the GPU, and on a machine without one it must see `--device cuda` fail with the
# one-line "no CUDA GPU" error and then reports `SKIP: no GPU` (exit 77). In a build without
# CUDA, `device_cuda_not_compiled` checks the one-line refusal instead.
# Included by CMakeLists.txt.

if(EXISTS /usr/bin/python3)
  set(_dv_py /usr/bin/python3)
else()
  find_program(_dv_py NAMES python3 REQUIRED)
endif()
set(_dv_bin $<TARGET_FILE:ctxlab>)
if(CTXLAB_CUDA_EMULATOR OR CTXLAB_WITH_CUDA)
  if(CTXLAB_CUDA_EMULATOR)
    set(_dv_emulated 1)
  else()
    set(_dv_emulated 0)
  endif()
  add_test(NAME device_grads_cuda_vs_cpu
           COMMAND ${_dv_py} ${CMAKE_SOURCE_DIR}/tests/python/device_checks.py --bin ${_dv_bin}
                   --work ${CMAKE_BINARY_DIR}/cli_device_checks --emulated ${_dv_emulated}
                   --encodings none learned sinusoidal rope xpos alibi kerple t5 sandwich shaw xl deberta tupe
                   rnn complex-order [=[{"type":"floater","hidden":16,"dt":0.1,"substeps":2}]=]
                   [=[{"type":"fire","init_L":16}]=] [=[{"type":"cope","npos_max":8}]=]
                   [=[{"type":"rope","scaling":{"type":"pi","factor":4}}]=]
                   [=[{"type":"rope","scaling":{"type":"ntk","factor":4}}]=]
                   [=[{"type":"rope","scaling":{"type":"dynamic-ntk","factor":4}}]=]
                   [=[{"type":"rope","scaling":{"type":"yarn","factor":4}}]=]
                   [=[{"type":"rope","scaling":{"type":"rerope","factor":4,"window":8}}]=]
                   [=[{"type":"rope","scaling":{"type":"leaky-rerope","factor":16,"window":8}}]=]
                   [=[{"type":"rope","scaling":{"type":"llama3","factor":4,"original_context":16}}]=]
                   [=[{"type":"rope","scaling":{"type":"longrope","original_context":16,"short_factor":[1,1,1,1,2,2,2,2],"long_factor":[1,2,3,4,5,6,7,8]}}]=]
                   [=[{"type":"rope","scaling":{"type":"self-extend","window":8,"group":3}}]=]
                   "rope|--window 8 --sinks 3" "alibi|--window 8 --sinks 3" "t5|--window 8 --sinks 3"
                   "learned|--window 8 --sinks 3" "kerple|--window 8"
                   [=[{"type":"cope","npos_max":8}|--window 8 --sinks 3]=])
  set_tests_properties(device_grads_cuda_vs_cpu PROPERTIES
                       ENVIRONMENT "CTXLAB_THREADS=2;OMP_WAIT_POLICY=PASSIVE;PYTHONDONTWRITEBYTECODE=1"
                       SKIP_RETURN_CODE 77 TIMEOUT 300)
  # `ctxlab train --device cuda` against `--device cpu` (tests/python/device_train_checks.py):
  # 5 steps of a tiny model, SGD within 1e-5 on every tensor and AdamW with its measured bound
  # (docs/cuda.md); a run stopped on one device and resumed on the other, both ways.
  foreach(_dv_check parity resume)
    add_test(NAME device_train_cuda_vs_cpu_${_dv_check}
             COMMAND ${_dv_py} ${CMAKE_SOURCE_DIR}/tests/python/device_train_checks.py --bin ${_dv_bin}
                     --work ${CMAKE_BINARY_DIR}/cli_device_train_${_dv_check} --emulated ${_dv_emulated}
                     --check ${_dv_check})
    set_tests_properties(device_train_cuda_vs_cpu_${_dv_check} PROPERTIES
                         ENVIRONMENT "CTXLAB_THREADS=2;OMP_WAIT_POLICY=PASSIVE;PYTHONDONTWRITEBYTECODE=1"
                         SKIP_RETURN_CODE 77 TIMEOUT 300)
  endforeach()
  if(CTXLAB_CUDA_EMULATOR)
    # the same comparison with the threads of every block shuffled (a shared-memory race or a
    # schedule-dependent reduction in any kernel the model uses would show here)
    add_test(NAME device_grads_cuda_vs_cpu_shuffled COMMAND ${_dv_py} ${CMAKE_SOURCE_DIR}/tests/python/device_checks.py
             --bin ${_dv_bin} --work ${CMAKE_BINARY_DIR}/cli_device_checks_shuffled --emulated 1
             --encodings none learned rope alibi t5 shaw xl deberta tupe rnn complex-order
             [=[{"type":"floater","hidden":16,"dt":0.1,"substeps":2}]=]
             [=[{"type":"fire","init_L":16}]=] [=[{"type":"cope","npos_max":8}]=]
             [=[{"type":"rope","scaling":{"type":"yarn","factor":4}}]=]
             [=[{"type":"rope","scaling":{"type":"rerope","factor":4,"window":8}}]=])
    set_tests_properties(device_grads_cuda_vs_cpu_shuffled PROPERTIES
                         ENVIRONMENT "CTXLAB_EMU_SCHEDULE=shuffle:7;CTXLAB_THREADS=2;OMP_WAIT_POLICY=PASSIVE;PYTHONDONTWRITEBYTECODE=1"
                         TIMEOUT 300)
  endif()
else()
  # no CUDA backend: --device cuda is one line, exit non-zero
  add_test(NAME device_cuda_not_compiled
           COMMAND sh -c "if out=$('${_dv_bin}' train --preset tiny --steps 1 --device cuda --out '${CMAKE_BINARY_DIR}/cli_device_nocuda' 2>&1); then exit 1; fi; \
echo \"$out\"; test $(echo \"$out\" | wc -l) -eq 1 && echo \"$out\" | grep -q 'no CUDA backend'")
endif()
