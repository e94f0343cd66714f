/* Internal to ops/cuda: cuDNN's status codes as text, for the errors of the loader
 * (attention_cudnn_load.c), the graph builder (attention_cudnn_graph.c), the plan search
 * (attention_cudnn_plan.c) and the plan cache (attention_cudnn.c). Only the loaded API is
 * needed, so it sits below them all. */
#ifndef FR_ATTENTION_CUDNN_STATUS_H
#define FR_ATTENTION_CUDNN_STATUS_H

#include <stddef.h>

#include "ops/cuda/attention_cudnn_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* "<what>: CUDNN_STATUS_... (cuDNN's last error message)" into buf. */
void fr_cudnn_status_text(const frdnn_api *api, int status, const char *what, char *buf, size_t n);

#ifdef __cplusplus
}
#endif

#endif
