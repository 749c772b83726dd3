# The spin models of model/ (model/README.md): every model's properties hold
# and every known-bad variant gives a counterexample. Skipped (77) without
# spin. Label nosan: the models do not use the library, so the sanitizer
# builds need not run them again.
add_test(NAME model_check COMMAND bash ${CMAKE_SOURCE_DIR}/model/check.sh)
set_tests_properties(model_check PROPERTIES LABELS "model;nosan" SKIP_RETURN_CODE 77 TIMEOUT 900)
