/* Device discovery, available whether or not the CUDA backend was compiled in. */
#ifndef FR_CUDA_PROBE_H
#define FR_CUDA_PROBE_H

#ifdef __cplusplus
extern "C" {
#endif

#include "graph/status.h"

/* 1 when the library was built with the CUDA backend. */
int fr_cuda_compiled(void);
/* Number of usable CUDA devices; an error (with the CUDA runtime's reason) when none can be
 * queried, e.g. no driver on this machine. */
FR_NODISCARD fr_status fr_cuda_device_count(int *count);

#ifdef __cplusplus
}
#endif

#endif
