// pyllama90a wave64 runtime: the fp8 type's name (no fp8 code runs in the harness)
#pragma once
#include <cstdint>
struct __hip_fp8_e4m3 { uint8_t __x; };
