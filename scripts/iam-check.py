#!/usr/bin/env python3
"""Check AWS calls a function made against the IAM policy infra/template.yaml gives it.

Two steps, because the SAM translator and moto live in different virtualenvs
(target/lambda-venv brings aws-sam-translator with aws-sam-cli; target/moto-venv brings moto):

  iam-check.py policies --template infra/template.yaml --setting settings.json > policies.json
      (the lambda venv's python) Expand the template with the SAM translator, exactly as
      `sam deploy` would, then resolve the intrinsic functions (Ref, GetAtt, Sub, If, Join,
      Select, Split, the conditions) with the account, region, parameter values and physical
      resources in settings.json. Prints, per function logical id, the policy documents of its
      role (found through the translated function's `Role`, never by the template's layout)
      and its environment variables.

  iam-check.py check --policies policies.json < calls.json
      (moto's venv python) Evaluate each recorded call, {"function", "action", "resource"},
      against that function's policies with moto's IAM policy evaluation
      (moto.iam.access_control.IAMPolicy.is_action_permitted). Prints one line per denied call,
      `DENIED <function> <action> <resource>`, and exits 1 when there is any. What Lambda's
      poller does with the role of a function an SQS queue triggers (receive, delete, read
      the queue's attributes) is checked too, for each event source mapping.

settings.json: {"account": "123456789012", "region": "us-east-1",
                "parameters": {"WarmPoolSize": "2", ...},
                "resources": {"SessionsTable": {"Ref": "tb-x-sessions", "Arn": "arn:..."}, ...}}
A Ref or GetAtt of a resource settings.json does not name resolves to a value no real call can
match (`unresolved:...`), so a grant on it permits nothing the test saw.

The role's managed policies (AWSLambdaBasicExecutionRole, X-Ray's) are left out: they grant
logs and traces, which the runtime writes, never the functions' code.
"""

import argparse
import json
import os
import sys

PSEUDO = {
    "AWS::Partition": "aws",
    "AWS::URLSuffix": "amazonaws.com",
    "AWS::StackName": "threadbox",
    "AWS::StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/threadbox/0",
    "AWS::NotificationARNs": [],
}


class NoValue:
    """`Ref: AWS::NoValue`: the property (or list element) is removed."""


NO_VALUE = NoValue()


def translate(template_path, region):
    from samcli.yamlhelper import yaml_parse
    from samtranslator.translator.transform import transform

    with open(template_path, encoding="utf-8") as f:
        template = yaml_parse(f.read())
    # `sam validate` does the same: the translator wants an S3 location, the code is not read.
    for logical_id, resource in template.get("Resources", {}).items():
        if resource.get("Type") == "AWS::Serverless::Function":
            properties = resource.setdefault("Properties", {})
            if not str(properties.get("CodeUri", "")).startswith("s3://"):
                properties["CodeUri"] = f"s3://threadbox-code/{logical_id}"

    class NoManagedPolicies:
        def load(self):
            return {}

    os.environ.setdefault("AWS_DEFAULT_REGION", region)
    return transform(template, {}, NoManagedPolicies())


class Resolver:
    def __init__(self, template, settings):
        self.template = template
        self.account = settings["account"]
        self.region = settings["region"]
        self.resources = settings.get("resources", {})
        self.parameters = {}
        for name, spec in template.get("Parameters", {}).items():
            if "Default" in spec:
                self.parameters[name] = spec["Default"]
        self.parameters.update(settings.get("parameters", {}))
        self.conditions = {}

    def ref(self, name):
        if name == "AWS::NoValue":
            return NO_VALUE
        if name == "AWS::AccountId":
            return self.account
        if name == "AWS::Region":
            return self.region
        if name in PSEUDO:
            return PSEUDO[name]
        if name in self.parameters:
            value = self.parameters[name]
            return value if isinstance(value, list) else str(value)
        if name in self.resources and "Ref" in self.resources[name]:
            return self.resources[name]["Ref"]
        return f"unresolved:Ref:{name}"

    def get_att(self, name, attribute):
        known = self.resources.get(name, {})
        if attribute in known:
            return known[attribute]
        return f"unresolved:GetAtt:{name}.{attribute}"

    def condition(self, name):
        if name not in self.conditions:
            self.conditions[name] = self.truth(self.template["Conditions"][name])
        return self.conditions[name]

    def truth(self, node):
        (function, argument), = node.items()
        if function == "Condition":
            return self.condition(argument)
        if function == "Fn::Equals":
            left, right = (self.resolve(a) for a in argument)
            return str(left) == str(right)
        if function == "Fn::Not":
            return not self.truth(argument[0])
        if function == "Fn::And":
            return all(self.truth(a) for a in argument)
        if function == "Fn::Or":
            return any(self.truth(a) for a in argument)
        raise ValueError(f"unknown condition function {function}")

    def sub(self, text, variables):
        out, i = [], 0
        while i < len(text):
            start = text.find("${", i)
            if start < 0:
                out.append(text[i:])
                break
            out.append(text[i:start])
            end = text.index("}", start)
            name = text[start + 2 : end]
            if name.startswith("!"):
                out.append("${" + name[1:] + "}")
            elif name in variables:
                out.append(str(self.resolve(variables[name])))
            elif "." in name:
                resource, attribute = name.split(".", 1)
                out.append(str(self.get_att(resource, attribute)))
            else:
                out.append(str(self.ref(name)))
            i = end + 1
        return "".join(out)

    def resolve(self, node):
        if isinstance(node, list):
            items = (self.resolve(item) for item in node)
            return [item for item in items if item is not NO_VALUE]
        if not isinstance(node, dict):
            return node
        if len(node) == 1:
            (key, argument), = node.items()
            if key == "Ref":
                return self.ref(argument)
            if key == "Fn::GetAtt":
                name, attribute = argument if isinstance(argument, list) else argument.split(".", 1)
                return self.get_att(name, attribute)
            if key == "Fn::Sub":
                if isinstance(argument, list):
                    return self.sub(argument[0], argument[1])
                return self.sub(argument, {})
            if key == "Fn::If":
                name, if_true, if_false = argument
                return self.resolve(if_true if self.condition(name) else if_false)
            if key == "Fn::Join":
                separator, items = argument
                return separator.join(str(i) for i in self.resolve(items))
            if key == "Fn::Select":
                index, items = argument
                return self.resolve(items)[int(self.resolve(index))]
            if key == "Fn::Split":
                separator, text = argument
                return str(self.resolve(text)).split(separator)
        resolved = {}
        for key, value in node.items():
            value = self.resolve(value)
            if value is not NO_VALUE:
                resolved[key] = value
        return resolved


def policies(args):
    with open(args.setting, encoding="utf-8") as f:
        settings = json.load(f)
    template = translate(args.template, settings["region"])
    resolver = Resolver(template, settings)
    resources = template["Resources"]
    functions = {}
    for logical_id, resource in resources.items():
        if resource.get("Type") != "AWS::Lambda::Function":
            continue
        properties = resource.get("Properties", {})
        role = properties.get("Role")
        documents = []
        if isinstance(role, dict) and "Fn::GetAtt" in role:
            role_id = role["Fn::GetAtt"][0]
            role_properties = resources[role_id].get("Properties", {})
            for policy in resolver.resolve(role_properties.get("Policies", [])):
                documents.append(policy["PolicyDocument"])
        variables = resolver.resolve(properties.get("Environment", {}).get("Variables", {}))
        functions[logical_id] = {
            "policies": documents,
            "environment": {k: str(v) for k, v in variables.items()},
            "pollers": [],
        }
    # Lambda's poller reads an SQS event source with the function's role, not the code.
    for resource in resources.values():
        if resource.get("Type") != "AWS::Lambda::EventSourceMapping":
            continue
        properties = resource["Properties"]
        target = properties.get("FunctionName")
        if isinstance(target, dict) and "Ref" in target:
            target = target["Ref"]
        elif isinstance(target, dict) and "Fn::GetAtt" in target:
            target = target["Fn::GetAtt"][0]
        source = resolver.resolve(properties.get("EventSourceArn"))
        if target in functions and str(source).startswith("arn:aws:sqs:"):
            functions[target]["pollers"].append(source)
    json.dump({"functions": functions}, sys.stdout, indent=1, sort_keys=True)
    print()


def check(args):
    import fnmatch
    import re

    from moto.iam.access_control import IAMPolicy, IAMPolicyStatement, PermissionResult

    # moto's matcher turns only `*` into a regex and leaves `?` (and `.`) to the regex engine,
    # so Secrets Manager's `name-??????` breaks it. IAM's wildcards are the shell's `*` and `?`:
    # the standard library's translation of them, in place of moto's; the rest (statements,
    # Allow and Deny, Action and NotAction, lists) stays moto's.
    IAMPolicyStatement._match = staticmethod(
        lambda pattern, string: re.match(fnmatch.translate(pattern), string)
    )

    with open(args.policies, encoding="utf-8") as f:
        functions = json.load(f)["functions"]
    calls = json.load(sys.stdin)
    # What Lambda's poller does with the role of a function an SQS queue triggers
    # (the actions of AWSLambdaSQSQueueExecutionRole).
    for function, spec in sorted(functions.items()):
        for queue in spec.get("pollers", []):
            for action in ("sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"):
                calls.append({"function": function, "action": action, "resource": queue})
    denied = 0
    seen = set()
    for call in calls:
        key = (call["function"], call["action"], call["resource"])
        if key in seen:
            continue
        seen.add(key)
        function, action, resource = key
        if function not in functions:
            print(f"DENIED {function} {action} {resource} (no such function in the template)")
            denied += 1
            continue
        results = [
            IAMPolicy(json.dumps(document)).is_action_permitted(action, resource)
            for document in functions[function]["policies"]
        ]
        if PermissionResult.DENIED in results or PermissionResult.PERMITTED not in results:
            print(f"DENIED {function} {action} {resource}")
            denied += 1
    print(f"checked {len(seen)} distinct calls, {denied} denied")
    sys.exit(1 if denied else 0)


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("policies")
    p.add_argument("--template", required=True)
    p.add_argument("--setting", required=True)
    p.set_defaults(run=policies)
    c = commands.add_parser("check")
    c.add_argument("--policies", required=True)
    c.set_defaults(run=check)
    args = parser.parse_args()
    args.run(args)


if __name__ == "__main__":
    main()
