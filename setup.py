"""Packaging detail pyproject.toml cannot express: templates/ sits at the top of the checkout, where
people read and edit it, and ships inside the wheel as the data package kdagen.templates."""
from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["kdagen", "kdagen.*"]) + ["kdagen.templates"],
    package_dir={"kdagen.templates": "templates"},
    package_data={"kdagen.templates": ["**/*"]},
)
