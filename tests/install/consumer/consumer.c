/* Uses the installed C ABI (normgate/capi.h via normgate::capi): prints the
 * library version, whether a CUDA device is usable, and which route table the
 * installed library loads by itself (no NORMGATE_ROUTES: the one installed
 * beside it, found relative to the .so). tests/install/install_test.sh checks
 * the lines. */
#include <normgate/capi.h>
#include <stdio.h>

int main(void) {
  printf("version %s\n", ng_version());
  int dev = -1;
  if (ng_device_available(&dev) != NG_OK) {
    fprintf(stderr, "ng_device_available: %s\n", ng_last_error());
    return 1;
  }
  printf("device %d\n", dev);
  ng_route_info info;
  int rc = ng_route_for(NG_OP_BWD, NG_MODE_DET, 2048, 1000, NG_W_BF16, NG_FORM_PLAIN, NULL, &info);
  if (rc != NG_OK && rc != NG_EROUTE) {
    fprintf(stderr, "ng_route_for: %s\n", ng_last_error());
    return 1;
  }
  if (rc == NG_EROUTE && info.how != NG_ROUTE_REFUSED) { /* the table did not load */
    fprintf(stderr, "ng_route_for: %s\n", ng_last_error());
    return 1;
  }
  printf("table %s\n", info.table);
  printf("variant %s\n", info.variant);
  return 0;
}
