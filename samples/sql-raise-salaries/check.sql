SELECT id, name, department_id, hired_on, salary
FROM employees
ORDER BY id;
