// pyllama90a wave64 runtime: the HIP version the harness compiles ggml-hip as (ROCm 6.4, the gfx90a build's)
#pragma once
#define HIP_VERSION_MAJOR 6
#define HIP_VERSION_MINOR 4
#define HIP_VERSION_PATCH 0
#define HIP_VERSION 60400000
