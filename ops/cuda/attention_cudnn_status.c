/* cuDNN's status codes as text (see attention_cudnn_status.h). */
#include <stdio.h>

#include "ops/cuda/attention_cudnn_status.h"

void fr_cudnn_status_text(const frdnn_api *api, int status, const char *what, char *buf, size_t n)
{
    char last[512] = "";
    if (api->GetLastErrorString) api->GetLastErrorString(last, sizeof last);
    const char *name = api->GetErrorString ? api->GetErrorString(status) : NULL;
    snprintf(buf, n, "%s: %s (%d)%s%s%s", what, name ? name : "cuDNN error", status, last[0] ? " (" : "", last,
             last[0] ? ")" : "");
}
