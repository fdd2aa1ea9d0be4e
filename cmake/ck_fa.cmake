# Optional CK FlashAttention for gfx90a: cmake -DGGML_HIP=ON -DAMDGPU_TARGETS=gfx90a -DPYLLAMA90A_CK_FA=ON
#
# At configure time: the pinned CK source (vendor/prepare_ck.py) and CK's own fmha codegen for the small
# instance set of vendor/ck_fmha_codegen.py. At build time: those instances compiled for gfx90a into a
# static library linked into ggml-hip, plus the mapping (src/ck_fa/fmha_mapping.cpp) and the HIP glue
# (src/ck_fa/ck_fa_hip.cpp) as ggml-hip sources; PYLLAMA90A_CK_FA, defined for ggml-hip only, turns on
# patch 0010's call into the glue. Without the option nothing here runs and a build is unchanged.

set(PYLLAMA90A_CK_FA_DIR "${CMAKE_CURRENT_LIST_DIR}/..")

# Fetch (or reuse) CK and generate the instances into out_dir: sets ck_dir_var to the CK root and
# sources_var to the generated sources. A function of its own so tests can run it without a HIP toolchain.
function(pyllama90a_ck_fmha_generate out_dir ck_dir_var sources_var)
    execute_process(
        COMMAND "${Python_EXECUTABLE}" "${PYLLAMA90A_CK_FA_DIR}/vendor/prepare_ck.py"
        OUTPUT_VARIABLE ck_dir
        RESULT_VARIABLE prepare_rc
        OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(NOT prepare_rc EQUAL 0)
        message(FATAL_ERROR "pyllama90a: could not prepare the CK source (see the message above)")
    endif()
    execute_process(
        COMMAND "${Python_EXECUTABLE}" "${PYLLAMA90A_CK_FA_DIR}/vendor/ck_fmha_codegen.py" "${ck_dir}" "${out_dir}"
        RESULT_VARIABLE codegen_rc)
    if(NOT codegen_rc EQUAL 0)
        message(FATAL_ERROR "pyllama90a: CK's fmha codegen failed (see the message above)")
    endif()
    file(STRINGS "${out_dir}/sources.txt" sources)
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
        "${PYLLAMA90A_CK_FA_DIR}/vendor/ck.toml" "${PYLLAMA90A_CK_FA_DIR}/vendor/ck_fmha_codegen.py")
    set(${ck_dir_var} "${ck_dir}" PARENT_SCOPE)
    set(${sources_var} "${sources}" PARENT_SCOPE)
endfunction()

if(NOT PYLLAMA90A_CK_FA)
    return()
endif()
if(NOT GGML_HIP OR NOT TARGET ggml-hip)
    message(FATAL_ERROR "pyllama90a: PYLLAMA90A_CK_FA=ON needs -DGGML_HIP=ON (a ROCm >= 6.1 build of ggml-hip)")
endif()
if(NOT "gfx90a" IN_LIST CMAKE_HIP_ARCHITECTURES AND NOT "gfx90a" IN_LIST AMDGPU_TARGETS AND NOT "gfx90a" IN_LIST GPU_TARGETS)
    message(FATAL_ERROR "pyllama90a: PYLLAMA90A_CK_FA=ON compiles CK for gfx90a: add -DAMDGPU_TARGETS=gfx90a")
endif()

pyllama90a_ck_fmha_generate("${CMAKE_CURRENT_BINARY_DIR}/ck_fmha" PYLLAMA90A_CK_DIR PYLLAMA90A_CK_FMHA_SOURCES)
list(LENGTH PYLLAMA90A_CK_FMHA_SOURCES n_ck_sources)
message(STATUS "pyllama90a: CK FlashAttention: ${n_ck_sources} sources from ${PYLLAMA90A_CK_DIR}")

set(PYLLAMA90A_CK_INCLUDES "${PYLLAMA90A_CK_DIR}/include" "${PYLLAMA90A_CK_DIR}/example/ck_tile/01_fmha")
# the definitions and code-generation flags flash-attn's own CK build uses (its setup.py), for ROCm >= 6.1
set(PYLLAMA90A_CK_DEFINITIONS CK_TILE_FMHA_FWD_FAST_EXP2=1 CK_ENABLE_FP16 CK_USE_XDL)
# (its ROCm >= 6.2 inlining flags are left out: hip's version is known only inside ggml-hip's directory)
# (-Wno-invalid-constexpr: upstream clang rejects ck_tile's pk_fp4 constexpr converters, unused here)
set(PYLLAMA90A_CK_OPTIONS -fgpu-flush-denormals-to-zero -fno-offload-uniform-block -Wno-invalid-constexpr
    "SHELL:-mllvm --lsr-drop-solution=1" "SHELL:-mllvm -enable-post-misched=0")

# ggml-hip enables HIP in its own directory; a HIP target here needs it in this one as well
enable_language(HIP)
set_source_files_properties(${PYLLAMA90A_CK_FMHA_SOURCES} PROPERTIES LANGUAGE HIP)
add_library(pyllama90a_ck_fmha STATIC ${PYLLAMA90A_CK_FMHA_SOURCES})
set_target_properties(pyllama90a_ck_fmha PROPERTIES POSITION_INDEPENDENT_CODE ON HIP_ARCHITECTURES gfx90a)
target_include_directories(pyllama90a_ck_fmha PRIVATE ${PYLLAMA90A_CK_INCLUDES})
target_compile_definitions(pyllama90a_ck_fmha PRIVATE ${PYLLAMA90A_CK_DEFINITIONS})
target_compile_options(pyllama90a_ck_fmha PRIVATE ${PYLLAMA90A_CK_OPTIONS})
target_compile_features(pyllama90a_ck_fmha PRIVATE cxx_std_17)

# the glue includes ggml-cuda's internal headers and CK's: per-source include directories keep CK's
# generic header names (mask.hpp, utils.hpp) away from ggml-hip's other sources
set(glue "${PYLLAMA90A_CK_FA_DIR}/src/ck_fa/ck_fa_hip.cpp")
set(mapping "${PYLLAMA90A_CK_FA_DIR}/src/ck_fa/fmha_mapping.cpp")
# source properties are per directory: set them where ggml-hip is defined
set_source_files_properties("${glue}" TARGET_DIRECTORY ggml-hip PROPERTIES LANGUAGE HIP
    INCLUDE_DIRECTORIES "${LLAMA_CPP_DIR}/ggml/src/ggml-cuda;${PYLLAMA90A_CK_INCLUDES}"
    COMPILE_DEFINITIONS "${PYLLAMA90A_CK_DEFINITIONS}")
target_sources(ggml-hip PRIVATE "${glue}" "${mapping}")
target_compile_definitions(ggml-hip PRIVATE PYLLAMA90A_CK_FA)
target_link_libraries(ggml-hip PRIVATE pyllama90a_ck_fmha)
