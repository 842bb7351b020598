# Unity builds (CMAKE_UNITY_BUILD=ON with CMAKE_UNITY_BUILD_BATCH_SIZE=0: scripts/test.sh's
# sanitizer stages): each target's sources compile as one translation unit, which parses the
# headers (gtest, fmt, nlohmann/json, CLI11, the library's) and emits their inline code once per
# target instead of once per source. Under ASan+UBSan (-O1 -g1, g++ 12), CPU seconds apart ->
# as one unit: array_test 26 -> 10, meshlayout_nn 81 -> 31, io_test 37 -> 22.
#
# The sources below compile apart even then: each defines a name, file-local (in an anonymous
# namespace, or static), that another source of its target defines too, which one translation
# unit cannot hold. A new source that collides with another fails the unity build with
# "redefinition of …" (or an ambiguous call): rename the file-local name, or add the source here.
# To try a change: cmake -B build-unity -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=0
# and build its targets.
set(meshlayout_unity_alone
    src/meshlayout/cli/generate_command.cc
    src/meshlayout/cli/train_command_test.cc
    src/meshlayout/io/gpu_array_io_test.cc
    src/meshlayout/kernels/cpu/cross_entropy.cc
    src/meshlayout/kernels/cpu/lstm.cc
    src/meshlayout/kernels/cpu/moe.cc
    src/meshlayout/kernels/cpu/sigmoid_gate.cc
    src/meshlayout/layout_map/layout_map_test.cc
    src/meshlayout/models/llama_families_test.cc
    src/meshlayout/models/llama_gpu_test.cc
    src/meshlayout/models/llama_train_test.cc
    src/meshlayout/models/moe_model_test.cc
    src/meshlayout/nn/layers/activations/prelu_test.cc
    src/meshlayout/nn/layers/convolutional/conv2d_backward_test.cc
    src/meshlayout/nn/layers/convolutional/separable_conv2d_test.cc
    src/meshlayout/nn/layers/core/dense_test.cc
    src/meshlayout/nn/layers/core/einsum_dense_backward_test.cc
    src/meshlayout/nn/layers/core/embedding_backward_test.cc
    src/meshlayout/nn/layers/core/gated_feed_forward_test.cc
    src/meshlayout/nn/layers/core/reversible_embedding_test.cc
    src/meshlayout/nn/layers/merging/merge_backward_test.cc
    src/meshlayout/nn/layers/moe/sparse_moe.cc
    src/meshlayout/nn/layers/normalization/batch_normalization_backward_test.cc
    src/meshlayout/nn/layers/normalization/layer_normalization_test.cc
    src/meshlayout/nn/layers/regularization/dropout_test.cc
    src/meshlayout/nn/lora_test.cc
    src/meshlayout/ops/attention.cc
    src/meshlayout/ops/attention_backward.cc
    src/meshlayout/ops/attention_gpu_test.cc
    src/meshlayout/ops/moe.cc
    src/meshlayout/ops/sigmoid_gate.cc
    src/meshlayout/plan/plan_html_test.cc
    src/meshlayout/plan/step_memory.cc
    src/meshlayout/rules/hf_tp_plan_test.cc
    src/meshlayout/rules/maxtext_rules_test.cc
    src/meshlayout/rules/rule_dialects_test.cc
    src/meshlayout/runtime/device_memory.cc
    src/meshlayout/train/training_state.cc
    python/src/bind_layers.cc)

# Where to set the property: every directory that defines targets (source properties belong to
# the directory of the target that compiles them).
function(meshlayout_unity_directories dir out)
  set(dirs ${dir})
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    meshlayout_unity_directories(${sub} sub_dirs)
    list(APPEND dirs ${sub_dirs})
  endforeach()
  set(${out} ${dirs} PARENT_SCOPE)
endfunction()

if(CMAKE_UNITY_BUILD)
  meshlayout_unity_directories(${PROJECT_SOURCE_DIR} meshlayout_dirs)
  list(TRANSFORM meshlayout_unity_alone PREPEND ${PROJECT_SOURCE_DIR}/)
  set_source_files_properties(${meshlayout_unity_alone} DIRECTORY ${meshlayout_dirs}
                              PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
  # The CUDA kernels' tests (MESHLAYOUT_CUDA=ON) each define the same file-local helpers (kCpu,
  # kCuda, Case, cases(), check_case, ...): that target compiles one source at a time.
  if(TARGET cuda_kernels_test)
    set_target_properties(cuda_kernels_test PROPERTIES UNITY_BUILD OFF)
  endif()
endif()
