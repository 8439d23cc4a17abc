/* The built-in behaviours, in one unit (included by the host build and by every NVRTC program), in the order of
 * rv_builtins.h (checked by device/src/backend/mod.rs tests). */
#include "behaviours/echo.cu"
#include "behaviours/counter.cu"
#include "behaviours/kv.cu"
#include "behaviours/test.cu"
#include "behaviours/sensor.cu"
#include "behaviours/alerts.cu"
