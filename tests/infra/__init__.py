# Imported before any test module imports aws_cdk: infra's package replaces jsii's stderr relay
# (Node's banners as text, not as b'...' literals), which must happen before the kernel starts.
import infra  # noqa: F401
