/* A plugin that cannot be loaded (ctest bindings.plugin_missing): compiled twice, once as the
 * library it needs (BRAID_BROKEN_PLUGIN_DEP), once as the plugin, which is linked to that
 * library without an RPATH, so that dlopen fails as it does when libmpi is not installed. */
#ifdef BRAID_BROKEN_PLUGIN_DEP
int braid_test_absent_dep(void) { return 1; }
#else
int braid_test_absent_dep(void);
void braid_test_broken_plugin_entry(void);
void braid_test_broken_plugin_entry(void) { (void)braid_test_absent_dep(); }
#endif
